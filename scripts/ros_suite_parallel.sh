#!/usr/bin/env bash
# The test suite as one pytest per file, JOBS files at once (a 16-core GPU machine runs the ~12-minute
# ROS suite in a few minutes; every pytest session takes its own DDS domain, test/ros_harness.py).
# Usage: scripts/ros_suite_parallel.sh JOBS LOG_DIR [pytest args] -- PATHS...
# Each file's output goes to LOG_DIR/<file>.log; prints one line per file and a total; exit 1 if any failed.
# Left out: test_eval_many.py (Ray) and test_colcon_install.py (colcon), CI only. Files that compare
# /dev/shm before and after (Fast DDS segments of their own processes) run alone, after the others.
set -u -o pipefail
jobs=$1 logs=$2
shift 2
args=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do args+=("$1"); shift; done
[ $# -gt 0 ] && shift
PY=${RPY:-${PY:-python3}}
mkdir -p "$logs"
alone="test/test_dds_shm.py test/test_node_main.py"
files=()
for p in "${@:-test/}"; do
  p=${p#./}
  if [ -d "$p" ]; then for f in "${p%/}"/test_*.py; do files+=("$f"); done; else files+=("$p"); fi
done
parallel=() serial=()
for f in "${files[@]}"; do
  case " test/test_eval_many.py test/test_colcon_install.py " in *" $f "*) continue ;; esac
  case " $alone " in *" $f "*) serial+=("$f") ;; *) parallel+=("$f") ;; esac
done
summary() { grep -aE '^[=]* ?[0-9]+ (passed|failed|errors?|deselected|skipped)' "$1" | tail -1 | tr -d '='; }
run_one() {  # FILE [pytest args] -> LOG_DIR/<name>.log, one summary line
  local f=$1 log rc
  shift
  log="$logs/$(basename "$f" .py).log"
  if "$PY" -m pytest -q -rfEs --no-header -p no:cacheprovider "$@" "$f" > "$log" 2>&1; then rc=0; else rc=$?; fi
  # 5: no test collected (every test of the file deselected by the marker)
  [ "$rc" = 5 ] && rc=0
  echo "$f rc=$rc $(summary "$log")"
  return "$rc"
}
export -f run_one summary
export logs PY
status=0
# the biggest files first: the long ones start early and the short ones fill the gaps
mapfile -t ordered < <(for f in "${parallel[@]}"; do echo "$(stat -c %s "$f") $f"; done | sort -rn | cut -d' ' -f2)
printf '%s\n' "${ordered[@]}" | xargs -P "$jobs" -I{} bash -c 'f=$1; shift; run_one "$f" "$@"' _ {} "${args[@]}" || status=1
for f in "${serial[@]}"; do run_one "$f" "${args[@]}" || status=1; done
total=$(for l in "$logs"/*.log; do summary "$l"; done | grep -aoE '[0-9]+ (passed|failed|errors?|skipped)' \
        | awk '{n[$2]+=$1} END {for (k in n) printf "%d %s, ", n[k], k}')
echo "ros suite, ${#ordered[@]} files $jobs at once + ${#serial[@]} alone: ${total%, }"
# the failures' reports, and every log in one archive (a device call returns a limited number of files)
for l in "$logs"/*.log; do grep -aE "^(FAILED|ERROR) " "$l"; done
tar czf "$logs.tgz" -C "$(dirname "$logs")" "$(basename "$logs")"
exit $status
