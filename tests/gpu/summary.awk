# summary.awk - reads the BENCH lines of tests/gpu/run.sh's programs
#   BENCH <who> <kind> model=M [batch=B|tokens=T] key=value ...
# (who = ours | torch) and prints one comparison line per shape, then the
# targets of issues #9 and #10 as PASS/FAIL lines.
function kv(s,   a, i, n, p) {
  delete V
  n = split(s, a, " ")
  for (i = 1; i <= n; i++) if ((p = index(a[i], "=")) > 0) V[substr(a[i], 1, p - 1)] = substr(a[i], p + 1)
}
# the GPU-run issue's MFU targets: 40% at 1.5B and above, 30% at 0.5B
function mfu_goal(model) { return model == "0.5b" ? 0.30 : 0.40 }
/^BENCH / {
  kv($0)
  who = $2; kind = $3
  shape = (kind == "decode") ? "batch=" V["batch"] : "tokens=" V["tokens"]
  base = kind SUBSEP V["model"] SUBSEP shape
  # ours once per attention path (attn=); the peer (torch SDPA) is compared with each
  key = (who == "ours" && V["attn"] != "") ? kind SUBSEP V["model"] SUBSEP shape " attn=" V["attn"] : base
  if (who == "ours" && !(key in seen)) { seen[key] = 1; order[++nk] = key; base_of[key] = base }
  if (who == "torch") {
    peer_rate[base] = (kind == "prefill") ? V["tflops"] : V["tok_s"]
    peer_frac[base] = (kind == "update") ? V["mfu"] : V["frac"]
  }
  rate[key, who] = (kind == "prefill") ? V["tflops"] : V["tok_s"]
  frac[key, who] = (kind == "update") ? V["mfu"] : V["frac"]
  if (kind == "update" && who == "ours" && V["ms"] + 0 > 0) {
    upd_ms[key] = V["ms"]; upd_fwd[key] = V["fwd_ms"]; upd_bwd[key] = V["bwd_ms"]
  }
}
END {
  # a shape only the peer ran still gets its line; the peer's figures go beside every path of ours
  for (b in peer_rate) if (!(b in seen)) { found = 0; for (kk in base_of) if (base_of[kk] == b) found = 1
    if (!found) { seen[b] = 1; order[++nk] = b; base_of[b] = b } }
  for (i = 1; i <= nk; i++) { kk = order[i]; rate[kk, "torch"] = peer_rate[base_of[kk]]; frac[kk, "torch"] = peer_frac[base_of[kk]] }
  unit["decode"] = "tok/s"; unit["prefill"] = "TFLOP/s"; unit["update"] = "tok/s"
  what["decode"] = "roofline"; what["prefill"] = "of GEMM peak"; what["update"] = "MFU"
  for (i = 1; i <= nk; i++) {
    split(order[i], k, SUBSEP)
    o = rate[order[i], "ours"]; t = rate[order[i], "torch"]
    line = sprintf("%-8s %-5s %-12s ours %10s %s", k[1], k[2], k[3], o == "" ? "-" : o, unit[k[1]])
    if (frac[order[i], "ours"] != "") line = line sprintf(" (%.1f%% %s)", 100 * frac[order[i], "ours"], what[k[1]])
    line = line sprintf("  torch %10s", t == "" ? "-" : t)
    if (frac[order[i], "torch"] != "") line = line sprintf(" (%.1f%%)", 100 * frac[order[i], "torch"])
    if (o != "" && t != "" && t + 0 > 0) line = line sprintf("  ratio %.2f", o / t)
    print line
  }
  # where the time goes: prefill against the GEMM peak (attention staging,
  # issue #25 item 2) and the backward's share of an update step (items 3-4)
  for (i = 1; i <= nk; i++) {
    split(order[i], k, SUBSEP)
    f = frac[order[i], "ours"]
    if (k[1] == "prefill" && f != "")
      printf("INFO prefill %s %s: %.1f%% of the measured GEMM peak\n", k[2], k[3], 100 * f)
    if (k[1] == "update" && (order[i] in upd_ms) && upd_bwd[order[i]] != "")
      printf("INFO update %s %s: backward %.1f%% of the step (forward %.1f%%, optimizer %.1f%%; %.1f ms)\n", k[2], k[3],
             100 * upd_bwd[order[i]] / upd_ms[order[i]], 100 * upd_fwd[order[i]] / upd_ms[order[i]],
             100 * (upd_ms[order[i]] - upd_fwd[order[i]] - upd_bwd[order[i]]) / upd_ms[order[i]], upd_ms[order[i]])
  }
  # targets
  for (i = 1; i <= nk; i++) {
    split(order[i], k, SUBSEP)
    o = rate[order[i], "ours"]; t = rate[order[i], "torch"]; f = frac[order[i], "ours"]
    if (k[1] == "decode" && k[3] == "batch=64" && f != "")
      printf("%s target decode %s batch 64 >= 70%% of roofline: %.1f%%\n", (f + 0 >= 0.70) ? "PASS" : "FAIL", k[2], 100 * f)
    if (k[1] == "update" && f != "")
      printf("%s target update %s %s MFU >= %d%%: %.1f%%\n", (f + 0 >= mfu_goal(k[2])) ? "PASS" : "FAIL", k[2], k[3],
             100 * mfu_goal(k[2]), 100 * f)
    if ((k[1] == "decode" || k[1] == "update") && o != "" && t != "")
      printf("%s target %s %s %s faster than torch eager: ratio %.2f\n", (o + 0 > t + 0) ? "PASS" : "FAIL", k[1], k[2], k[3], (t + 0 > 0) ? o / t : 0)
    else if ((k[1] == "decode" || k[1] == "update") && t == "")
      printf("SKIP target %s %s %s faster than torch eager: no torch number\n", k[1], k[2], k[3])
  }
}
