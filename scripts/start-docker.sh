#!/usr/bin/env bash
# Make a local Docker engine answer, and build the small image the probes use (no registry).
#   - installs Debian's docker.io and busybox-static when missing (needs root and apt);
#   - starts dockerd with the vfs storage driver, no iptables and no bridge;
#   - imports a busybox-static root filesystem as image simrollout-busybox:local.
set -euo pipefail
IMAGE="${SIMROLLOUT_IMAGE:-simrollout-busybox:local}"

if ! docker info >/dev/null 2>&1; then
  if ! command -v dockerd >/dev/null 2>&1 || [ ! -x /bin/busybox ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq docker.io busybox-static >/dev/null
  fi
  nohup dockerd --iptables=false --ip6tables=false --bridge=none --storage-driver=vfs \
    >/var/log/simrollout-dockerd.log 2>&1 &
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && break
    sleep 1
  done
  docker info >/dev/null 2>&1 || { echo "dockerd did not start; see /var/log/simrollout-dockerd.log" >&2; exit 1; }
fi

if ! docker image inspect "$IMAGE" >/dev/null 2>&1; then
  [ -x /bin/busybox ] || { apt-get update -qq && apt-get install -y -qq busybox-static >/dev/null; }
  root=$(mktemp -d)
  mkdir -p "$root/bin" "$root/tmp" "$root/work"
  cp /bin/busybox "$root/bin/busybox"
  for cmd in sh sleep echo cat ls true false mkdir rm cp dd head wc sha256sum usleep; do
    ln -sf busybox "$root/bin/$cmd"
  done
  tar -C "$root" -c . | docker import -c 'CMD ["/bin/sleep","3600"]' - "$IMAGE" >/dev/null
  rm -rf "$root"
fi
echo "docker engine ready: $(docker version --format '{{.Server.Version}}'), image $IMAGE"
