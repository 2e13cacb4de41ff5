# Sourced by .ci/run (and usable by hand): a throwaway Docker registry on a
# free loopback port, with its own storage folder and configuration, for
# the image pull and publish tests. `registry_start` exports its address
# as REHEARSE_TEST_REGISTRY; `registry_stop` stops it and removes its folder.

registry_start() {
    local dir port
    dir=$(mktemp -d /tmp/rehearse-registry.XXXXXX)
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    cat > "$dir/config.yml" <<YAML
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $dir/storage
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$port
YAML
    docker-registry serve "$dir/config.yml" > "$dir/registry.log" 2>&1 &
    REHEARSE_REGISTRY_PID=$!
    REHEARSE_REGISTRY_DIR=$dir
    for _ in $(seq 1 50); do
        if curl -fsS "http://127.0.0.1:$port/v2/" >/dev/null 2>&1; then
            export REHEARSE_TEST_REGISTRY="127.0.0.1:$port"
            echo "ci: registry on $REHEARSE_TEST_REGISTRY (pid $REHEARSE_REGISTRY_PID, storage $dir/storage)"
            return 0
        fi
        sleep 0.1
    done
    echo "ci: the registry did not answer on 127.0.0.1:$port; its log:" >&2
    cat "$dir/registry.log" >&2
    registry_stop
    return 1
}

registry_stop() {
    if [ -n "${REHEARSE_REGISTRY_PID:-}" ]; then
        kill "$REHEARSE_REGISTRY_PID" 2>/dev/null || true
        wait "$REHEARSE_REGISTRY_PID" 2>/dev/null || true
        REHEARSE_REGISTRY_PID=
    fi
    if [ -n "${REHEARSE_REGISTRY_DIR:-}" ]; then
        rm -rf "$REHEARSE_REGISTRY_DIR"
        REHEARSE_REGISTRY_DIR=
    fi
}
