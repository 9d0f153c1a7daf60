# b_verify_table.awk - one case set's table for bench/b_verify.sh: per kind, skpo
# (skpo-reward --verify-cases output, first file) next to math-verify
# (bench/b_verify_peer.py output, second file, may be empty). -v set=NAME.
    FNR == 1 { f++ }
    f == 1 && $1 == "kind" { split($3, a, "/"); o[$2] = a[1] " " a[2] " " $6 " " $8; if (!($2 in seen)) { seen[$2] = 1; order[++nk] = $2 } }
    f == 1 && $1 == "accuracy" { split($2, a, "/"); oacc = a[1] " " a[2] " " $5 " " $7 }
    f == 1 && $1 == "speed" { ospeed = $2 }
    f == 2 && $1 == "kind" { p[$2] = $3 " " $4 " " $5 " " $6 }
    f == 2 && $1 == "total" { pacc = $2 " " $3 " " $4 " " $5; pspeed = $6; pto = $7 }
    END {
      printf "%-22s %22s   %22s\n", "kind", "skpo: acc (fp/fn)", "math-verify: acc (fp/fn)"
      for (i = 1; i <= nk; i++) {
        k = order[i]; split(o[k], a, " "); line = sprintf("%-22s %5d/%-5d %5.1f%% (%d/%d)", k, a[1], a[2], 100 * a[1] / a[2], a[3], a[4])
        if (k in p) { split(p[k], b, " "); line = line sprintf("   %5d/%-5d %5.1f%% (%d/%d)", b[1], b[2], 100 * b[1] / b[2], b[3], b[4])
          if (a[1] < b[1]) line = line "  <- below math-verify" }
        print line
      }
      split(oacc, a, " ")
      printf "%s: skpo math verifier: accuracy %d/%d %.2f%%, false positives %d, false negatives %d, %s checks/s (1 core)\n", set, a[1], a[2], 100 * a[1] / a[2], a[3], a[4], ospeed
      if (pacc != "") {
        split(pacc, b, " ")
        printf "%s: math-verify (verl config): accuracy %d/%d %.2f%%, false positives %d, false negatives %d, %s checks/s (1 core, %d timeouts)\n", set, b[1], b[2], 100 * b[1] / b[2], b[3], b[4], pspeed, pto
        if (pspeed > 0) printf "%s: speed ratio (skpo / math-verify): %.0fx\n", set, ospeed / pspeed
      }
    }
