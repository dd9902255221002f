# Sourced by tests whose timings or counts must not depend on what else /dev/shm holds:
#   private_shm SIZE "$0" "$@"
# re-runs the calling script in a private mount namespace over a tmpfs of SIZE of its own on
# /dev/shm (nothing it leaves there outlives it) and exits with its status; inside the namespace
# (GMEM_PRIVATE_SHM=1) it returns at once. Exits 77, saying why, where no namespace or tmpfs
# can be made (not root, no unshare).
private_shm() {
  local size=$1
  shift
  [ -n "${GMEM_PRIVATE_SHM:-}" ] && return 0
  if ! command -v unshare >/dev/null || ! unshare -m true 2>/dev/null; then
    echo "$(basename "$1"): skipped: cannot make a mount namespace for a /dev/shm of its own"
    exit 77
  fi
  GMEM_PRIVATE_SHM=1 unshare -m bash -c \
    'mount -t tmpfs -o size='"$size"',mode=1777 tmpfs /dev/shm || exit 90; exec bash "$@"' bash "$@"
  local rc=$?
  if [ $rc = 90 ]; then
    echo "$(basename "$1"): skipped: cannot mount a tmpfs over /dev/shm in a mount namespace"
    exit 77
  fi
  exit $rc
}
