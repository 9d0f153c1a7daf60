# summary.awk - reads the BENCH lines of tests/gpu/run.sh's programs
#   BENCH <who> <kind> model=M [batch=B|tokens=T] [attn=PATH] key=value ...
# (who = ours | torch) and prints one comparison line per shape and, for ours,
# per attention path (attn=cudnn|flash|custom, each against the same torch
# line), then the targets of issues #9 and #10 as PASS/FAIL lines.
function kv(s,   a, i, n, p) {
  delete V
  n = split(s, a, " ")
  for (i = 1; i <= n; i++) if ((p = index(a[i], "=")) > 0) V[substr(a[i], 1, p - 1)] = substr(a[i], p + 1)
}
/^BENCH / {
  kv($0)
  who = $2; kind = $3
  shape = (kind == "decode") ? "batch=" V["batch"] : "tokens=" V["tokens"]
  base = kind SUBSEP V["model"] SUBSEP shape
  key = base SUBSEP (("attn" in V) ? "attn=" V["attn"] : "")
  r = (kind == "prefill") ? V["tflops"] : V["tok_s"]
  f = (kind == "update") ? V["mfu"] : V["frac"]
  if (who == "torch") { trate[base] = r; tfrac[base] = f; if (!(base in tseen)) { tseen[base] = 1; torder[++nt] = base }; next }
  if (!(key in seen)) { seen[key] = 1; order[++nk] = key }
  ours[base] = 1
  rate[key, who] = r
  frac[key, who] = f
  if (kind == "update" && V["ms"] + 0 > 0) {
    upd_ms[key] = V["ms"]; upd_fwd[key] = V["fwd_ms"]; upd_bwd[key] = V["bwd_ms"]
  }
}
END {
  unit["decode"] = "tok/s"; unit["prefill"] = "TFLOP/s"; unit["update"] = "tok/s"
  what["decode"] = "roofline"; what["prefill"] = "of GEMM peak"; what["update"] = "MFU"
  # torch lines with no line of ours still print (ours "-")
  for (i = 1; i <= nt; i++) if (!(torder[i] in ours)) { order[++nk] = torder[i] SUBSEP ""; seen[order[nk]] = 1 }
  for (i = 1; i <= nk; i++) {
    split(order[i], k, SUBSEP)
    b = k[1] SUBSEP k[2] SUBSEP k[3]
    o = rate[order[i], "ours"]; t = trate[b]
    line = sprintf("%-8s %-5s %-12s %-12s ours %10s %s", k[1], k[2], k[3], k[4], o == "" ? "-" : o, unit[k[1]])
    if (frac[order[i], "ours"] != "") line = line sprintf(" (%.1f%% %s)", 100 * frac[order[i], "ours"], what[k[1]])
    line = line sprintf("  torch %10s", t == "" ? "-" : t)
    if (tfrac[b] != "") line = line sprintf(" (%.1f%%)", 100 * tfrac[b])
    if (o != "" && t != "" && t + 0 > 0) line = line sprintf("  ratio %.2f", o / t)
    print line
  }
  # where the time goes: prefill against the GEMM peak (attention staging,
  # issue #25 item 2) and the backward's share of an update step (items 3-4)
  for (i = 1; i <= nk; i++) {
    split(order[i], k, SUBSEP)
    f = frac[order[i], "ours"]
    at = (k[4] == "") ? "" : " " k[4]
    if (k[1] == "prefill" && f != "")
      printf("INFO prefill %s %s%s: %.1f%% of the measured GEMM peak\n", k[2], k[3], at, 100 * f)
    if (k[1] == "update" && (order[i] in upd_ms) && upd_bwd[order[i]] != "")
      printf("INFO update %s %s%s: backward %.1f%% of the step (forward %.1f%%, optimizer %.1f%%; %.1f ms)\n", k[2], k[3], at,
             100 * upd_bwd[order[i]] / upd_ms[order[i]], 100 * upd_fwd[order[i]] / upd_ms[order[i]],
             100 * (upd_ms[order[i]] - upd_fwd[order[i]] - upd_bwd[order[i]]) / upd_ms[order[i]], upd_ms[order[i]])
    # the fastest attention path of each shape: the one to keep (issue #30)
    b = k[1] SUBSEP k[2] SUBSEP k[3]
    o = rate[order[i], "ours"]
    if (o != "" && (!(b in best) || o + 0 > rate[best[b], "ours"] + 0)) best[b] = order[i]
    if (k[4] != "") npath[b]++
  }
  for (i = 1; i <= nk; i++) {
    split(order[i], k, SUBSEP)
    b = k[1] SUBSEP k[2] SUBSEP k[3]
    if (npath[b] > 1 && best[b] == order[i]) {
      line = sprintf("INFO fastest attention path %s %s %s: %s", k[1], k[2], k[3], k[4])
      for (j = 1; j <= nk; j++) {
        split(order[j], q, SUBSEP)
        if (q[1] SUBSEP q[2] SUBSEP q[3] == b && j != i && rate[order[j], "ours"] + 0 > 0)
          line = line sprintf(", %.2fx %s", rate[order[i], "ours"] / rate[order[j], "ours"], q[4])
      }
      print line
    }
  }
  # targets, on each shape's fastest path
  for (i = 1; i <= nk; i++) {
    split(order[i], k, SUBSEP)
    b = k[1] SUBSEP k[2] SUBSEP k[3]
    if ((b in best) && best[b] != order[i]) continue
    at = (k[4] == "") ? "" : " (" k[4] ")"
    o = rate[order[i], "ours"]; t = trate[b]; f = frac[order[i], "ours"]
    if (k[1] == "decode" && k[3] == "batch=64" && f != "")
      printf("%s target decode %s batch 64 >= 70%% of roofline%s: %.1f%%\n", (f + 0 >= 0.70) ? "PASS" : "FAIL", k[2], at, 100 * f)
    if (k[1] == "update" && f != "")
      printf("%s target update %s MFU >= 40%%%s: %.1f%%\n", (f + 0 >= 0.40) ? "PASS" : "FAIL", k[2], at, 100 * f)
    if ((k[1] == "decode" || k[1] == "update") && o != "" && t != "")
      printf("%s target %s %s %s faster than torch eager%s: ratio %.2f\n", (o + 0 > t + 0) ? "PASS" : "FAIL", k[1], k[2], k[3], at, (t + 0 > 0) ? o / t : 0)
    else if ((k[1] == "decode" || k[1] == "update") && t == "")
      printf("SKIP target %s %s %s faster than torch eager: no torch number\n", k[1], k[2], k[3])
  }
}
