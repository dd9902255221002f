# Sourced by the exporter tests: `serving_port FILE [SECONDS]` waits up to SECONDS (5) for the
# line "serving http://127.0.0.1:PORT/metrics" that `gmem exporter` writes to its stderr (FILE)
# and prints PORT; nothing when the line did not come.
serving_port() {
  local port= _
  for _ in $(seq $((${2:-5} * 10))); do
    port=$(sed -n 's|.*serving http://127.0.0.1:\([0-9]*\)/metrics.*|\1|p' "$1")
    [ -n "$port" ] && break
    sleep 0.1
  done
  echo "$port"
}
