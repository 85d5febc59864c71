#!/bin/sh
# milo-ipam on a node, from this image alone (nothing is fetched):
#
#   milo-ipam-node.sh install     the init container of deploy/agent.yaml
#   milo-ipam-node.sh uninstall   the init container of deploy/uninstall.yaml
#
# The host's directories are mounted under $MILO_IPAM_HOST (/host) at their
# host paths: the host's /opt/cni/bin at /host/opt/cni/bin, and so on.
#
# install: makes the plugin's directories root's (0700; /etc/milo-ipam 0755),
# writes the Milo token to tmpfs (/run/milo-ipam-secrets/token, 0600), the CA
# and the node config: the one the image's binary was compiled against plus
# this node's name (NODE_NAME, from the downward API). Then it copies the
# image's binary into /opt/cni/bin and checks its sha256 against the one
# recorded when the image was built. Each file is written beside its target,
# fsynced and renamed over it, so a runtime never reads or execs half a file.
# Last, it removes the token an older layout kept on disk in /etc/milo-ipam.
#
# uninstall: removes the Milo token from the node, refusing while an agent's
# socket is there (the agent DaemonSet still runs, or is being rolled).
set -eu
umask 077

HOST=${MILO_IPAM_HOST:-/host}
IMAGE=${MILO_IPAM_IMAGE:-/usr/lib/milo-ipam}      # SHA256SUMS and node.json, from the build
BINARY=${MILO_IPAM_BINARY:-/opt/cni/bin/milo-ipam} # the image's compiled plugin
TOKEN=${MILO_IPAM_TOKEN:-/secret/token}           # Secret milo-ipam-token, key token
CA=${MILO_IPAM_CA:-/config/ca.crt}                # ConfigMap milo-ipam-node, key ca.crt

CNI_BIN=$HOST/opt/cni/bin
ETC=$HOST/etc/milo-ipam
SECRETS=$HOST/run/milo-ipam-secrets
SOCKET_DIR=$HOST/run/milo-ipam
LOG_DIR=$HOST/var/log/milo-ipam
STATE_DIR=$HOST/var/lib/milo-ipam

say() { echo "milo-ipam-node: $*" >&2; }
die() {
  say "$*"
  exit 1
}

# A real directory (not a symlink) of this user's (root's), given `mode`.
own_dir() { # dir mode
  if [ -L "$1" ] || [ ! -d "$1" ]; then die "$1 is not a directory"; fi
  owner=$(stat -c %u "$1")
  if [ "$owner" != "$(id -u)" ]; then die "$1 is owned by uid $owner, not $(id -u)"; fi
  chmod "$2" "$1"
}

# Writes stdin to `target` with `mode`: beside it, fsynced, renamed over it.
put() { # target mode
  tmp=$(mktemp "$(dirname "$1")/.$(basename "$1").XXXXXX")
  if cat >"$tmp" && chmod "$2" "$tmp" && sync "$tmp" && mv -f "$tmp" "$1"; then
    sync "$(dirname "$1")"
  else
    rm -f "$tmp"
    die "cannot write $1"
  fi
}

sha256_of() { sha256sum <"$1" | cut -d' ' -f1; }

# The node config compiled into the binary, with this node's name first.
node_config() {
  node=${NODE_NAME:-}
  case $node in
    [a-z0-9] | [a-z0-9]*[a-z0-9]) ;;
    *) die "NODE_NAME '$node' is not a node name (set it from spec.nodeName)" ;;
  esac
  case $node in *[!a-z0-9.-]*) die "NODE_NAME '$node' is not a node name" ;; esac
  if [ ${#node} -gt 253 ]; then die "NODE_NAME is longer than 253 characters"; fi
  if grep -q '"node"[[:space:]]*:' "$IMAGE/node.json"; then
    die "$IMAGE/node.json names a node; the image's node config leaves it to NODE_NAME"
  fi
  if ! head -n 1 "$IMAGE/node.json" | grep -qx '[[:space:]]*{[[:space:]]*'; then
    die "$IMAGE/node.json does not open with a line of its own holding '{'"
  fi
  printf '{\n  "node": "%s",\n' "$node"
  sed 1d "$IMAGE/node.json"
}

install_binary() {
  want=$(awk '$2 == "milo-ipam" || $2 == "*milo-ipam" { print $1 }' "$IMAGE/SHA256SUMS")
  if [ ${#want} -ne 64 ]; then die "$IMAGE/SHA256SUMS holds no sha256 of milo-ipam"; fi
  target=$CNI_BIN/milo-ipam
  if [ -f "$target" ] && [ ! -L "$target" ] && [ "$(sha256_of "$target")" = "$want" ]; then
    say "$target is already this image's binary (sha256 $want)"
    return 0
  fi
  tmp=$(mktemp "$CNI_BIN/.milo-ipam.XXXXXX")
  if ! cp "$BINARY" "$tmp" || ! chmod 0755 "$tmp"; then
    rm -f "$tmp"
    die "cannot copy $BINARY to $CNI_BIN"
  fi
  got=$(sha256_of "$tmp")
  if [ "$got" != "$want" ]; then
    rm -f "$tmp"
    die "the copy of $BINARY has sha256 $got, not $want recorded at build; $target unchanged"
  fi
  if ! sync "$tmp" || ! mv -f "$tmp" "$target"; then
    rm -f "$tmp"
    die "cannot rename the new binary over $target"
  fi
  sync "$CNI_BIN"
  say "installed $target (sha256 $want)"
}

install() {
  for d in "$SECRETS" "$SOCKET_DIR" "$LOG_DIR" "$STATE_DIR"; do own_dir "$d" 0700; done
  own_dir "$ETC" 0755
  if [ ! -s "$TOKEN" ]; then die "$TOKEN is missing or empty (Secret milo-ipam-token, key token)"; fi
  put "$SECRETS/token" 0600 <"$TOKEN"
  if [ ! -s "$CA" ]; then die "$CA is missing or empty (ConfigMap milo-ipam-node, key ca.crt)"; fi
  put "$ETC/ca.crt" 0644 <"$CA"
  config=$(node_config)
  printf '%s\n' "$config" | put "$ETC/node.json" 0644
  install_binary
  # The token's place before it moved to tmpfs: persistent disk, so removed.
  if [ -e "$ETC/token" ]; then
    rm -f "$ETC/token"
    sync "$ETC"
    say "removed the token the older layout kept in $ETC"
  fi
  say "node $NODE_NAME ready"
}

uninstall() {
  if [ -e "$SOCKET_DIR/agent.sock" ]; then
    die "an agent socket is on this node ($SOCKET_DIR/agent.sock): delete the milo-ipam-agent" \
      "DaemonSet first (a socket left by a crashed agent: remove it by hand)"
  fi
  for t in "$SECRETS/token" "$ETC/token"; do
    if [ -e "$t" ] || [ -L "$t" ]; then
      rm -f "$t"
      sync "$(dirname "$t")"
      say "removed $t"
    fi
  done
  say "no Milo token left on this node"
}

case ${1:-} in
  install) install ;;
  uninstall) uninstall ;;
  *) die "usage: milo-ipam-node.sh install|uninstall" ;;
esac
