// test_kvcache.c - paged KV cache: sharing, copy-on-write, accounting.
#include "harness.h"
#include "model/kvcache.h"

static skpo_kv *mk(size_t nblocks) {
    skpo_kv_shape sh = {.n_layers = 2, .kv_dim = 4, .block_size = 4, .n_blocks = nblocks, .max_seqs = 16};
    skpo_err e = {0};
    skpo_kv *kv = skpo_kv_new(&sh, &e);
    SKPO_ASSERT(kv);
    return kv;
}

static void fill(skpo_kv *kv, int seq, int from, int to, float base) {
    for (int p = from; p < to; p++)
        for (int l = 0; l < 2; l++)
            for (int d = 0; d < 4; d++) {
                skpo_kv_k(kv, seq, l, p)[d] = base + (float)(p * 100 + l * 10 + d);
                skpo_kv_v(kv, seq, l, p)[d] = -(base + (float)(p * 100 + l * 10 + d));
            }
}

static void forked_sequences_share_prefix_blocks(void) {
    skpo_kv *kv = mk(64);
    int s = skpo_kv_seq_new(kv);
    CHECK(skpo_kv_seq_append(kv, s, 10) == 0);  // 3 blocks, last partial
    fill(kv, s, 0, 10, 0);
    CHECK(skpo_kv_blocks_used(kv) == 3);
    int f[8];
    for (int i = 0; i < 8; i++) f[i] = skpo_kv_seq_fork(kv, s);
    CHECK(skpo_kv_blocks_used(kv) == 3);  // G forks hold one copy of the prefix
    for (int i = 0; i < 8; i++) CHECK(skpo_kv_k(kv, f[i], 1, 9)[2] == skpo_kv_k(kv, s, 1, 9)[2]);
    // Each fork appends 6 positions: copy of the partial block + 1 new block.
    for (int i = 0; i < 8; i++) {
        CHECK(skpo_kv_seq_append(kv, f[i], 6) == 10);
        fill(kv, f[i], 10, 16, 1000.0f * (float)(i + 1));
    }
    CHECK(skpo_kv_blocks_used(kv) == 3 + 8 * 2);
    // Copy-on-write kept the shared rows and isolated the new ones.
    for (int i = 0; i < 8; i++) {
        CHECK(skpo_kv_k(kv, f[i], 0, 9)[0] == 900.0f);
        CHECK(skpo_kv_k(kv, f[i], 0, 10)[0] == 1000.0f * (float)(i + 1) + 1000.0f);
        CHECK(skpo_kv_v(kv, f[i], 1, 8)[3] == -(813.0f));
    }
    CHECK(skpo_kv_seq_len(kv, s) == 10);
    for (int i = 0; i < 8; i++) skpo_kv_seq_free(kv, f[i]);
    CHECK(skpo_kv_blocks_used(kv) == 3);
    skpo_kv_seq_free(kv, s);
    CHECK(skpo_kv_blocks_used(kv) == 0);
    skpo_kv_free(kv);
}

static void append_fails_cleanly_when_pool_is_full(void) {
    skpo_kv *kv = mk(2);
    int s = skpo_kv_seq_new(kv);
    CHECK(skpo_kv_seq_append(kv, s, 8) == 0);
    CHECK(skpo_kv_seq_append(kv, s, 1) == -1);
    CHECK(skpo_kv_seq_len(kv, s) == 8);
    skpo_kv_seq_truncate(kv, s, 3);
    CHECK(skpo_kv_blocks_used(kv) == 1);
    CHECK(skpo_kv_seq_append(kv, s, 5) == 3);
    skpo_kv_seq_free(kv, s);
    skpo_kv_free(kv);
}

static void fork_of_block_aligned_prefix_copies_nothing(void) {
    skpo_kv *kv = mk(16);
    int s = skpo_kv_seq_new(kv);
    skpo_kv_seq_append(kv, s, 8);
    int f = skpo_kv_seq_fork(kv, s);
    CHECK(skpo_kv_seq_append(kv, f, 1) == 8);
    CHECK(skpo_kv_blocks_used(kv) == 3);
    int n1, n2;
    const int *b1 = skpo_kv_seq_blocks(kv, s, &n1);
    const int *b2 = skpo_kv_seq_blocks(kv, f, &n2);
    CHECK(n1 == 2 && n2 == 3 && b1[0] == b2[0] && b1[1] == b2[1]);
    skpo_kv_seq_free(kv, s);
    skpo_kv_seq_free(kv, f);
    skpo_kv_free(kv);
}

int main(void) {
    RUN(forked_sequences_share_prefix_blocks);
    RUN(append_fails_cleanly_when_pool_is_full);
    RUN(fork_of_block_aligned_prefix_copies_nothing);
    return TEST_SUMMARY();
}
