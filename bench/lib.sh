# What every bench script shares, sourced after it cd's to the repository
# root: the machine's CPU steal, to print beside each figure (this machine
# is shared, and other tenants take CPU).

# A snapshot of the machine's CPU time: "<steal ticks> <total ticks>".
steal() { awk '/^cpu /{print $9, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat; }

# steal_since SNAPSHOT: the % of the machine's CPU time stolen since
# SNAPSHOT (a `steal` output), one decimal.
steal_since() {
  awk -v a="$1" -v b="$(steal)" 'BEGIN { split(a, x, " "); split(b, y, " "); t = y[2] - x[2];
    printf "%.1f", (t > 0 ? 100 * (y[1] - x[1]) / t : 0) }'
}
