# Stage one file (a GGUF) into the node's models folder, then verify its sha256 (runs on a
# node). Sent on standard input to `sh -s` in a one-shot container of the engine's own
# image (llama.cpp's images have sh, curl and sha256sum, not Python).
#
# Reads SERVEFLEET_WEIGHTS_{URL | REPO, REVISION, FILE}, _SHA256 and _DEST, HF_TOKEN and
# HF_ENDPOINT from its environment. Downloads to DEST.partial (curl -C - resumes it), checks
# the sha256, then renames it into place; a file already at DEST is kept when its sha256 is
# the pinned one and refused otherwise (it is the operator's: never overwritten). A
# verified file is recorded in .servefleet/ next to it, so the next deploy checks its size
# only. Prints lines starting "@@weights" (see fetch_snapshot.py); exits 0 only when DEST
# holds the pinned file.
set -u
say() { echo "@@weights $*"; }
dest=$SERVEFLEET_WEIGHTS_DEST
want=$SERVEFLEET_WEIGHTS_SHA256
dir=$(dirname "$dest")
name=$(basename "$dest")
record="$dir/.servefleet/$name.verified"
part="$dest.partial"
size_of() { stat -c %s "$1" 2>/dev/null || { wc -c < "$1"; } 2>/dev/null || echo 0; }

if [ -f "$dest" ]; then
    if [ -f "$record" ] && [ "$(cat "$record")" = "$want $(size_of "$dest")" ]; then
        say cached 1 "$(size_of "$dest")"
        exit 0
    fi
    got=$(sha256sum "$dest" | cut -d' ' -f1)
    if [ "$got" != "$want" ]; then
        say error "$dest holds another file (sha256 $got, not the pinned $want): move it" \
            "away or fix the profile's source.sha256; it is not overwritten"
        exit 4
    fi
else
    headers=/tmp/servefleet-weights-headers
    : > "$headers"
    if [ -n "${SERVEFLEET_WEIGHTS_URL:-}" ]; then
        url=$SERVEFLEET_WEIGHTS_URL
    else
        url="${HF_ENDPOINT:-https://huggingface.co}/$SERVEFLEET_WEIGHTS_REPO/resolve/$SERVEFLEET_WEIGHTS_REVISION/$SERVEFLEET_WEIGHTS_FILE"
        # The token goes to curl in a file (printf is the shell's own): never in an argv.
        if [ -n "${HF_TOKEN:-}" ]; then
            printf 'Authorization: Bearer %s\n' "$HF_TOKEN" > "$headers"
        fi
    fi
    total=0
    if head=$(curl -fsSIL -H "@$headers" "$url" 2>/dev/null); then
        total=$(printf '%s\n' "$head" | tr -d '\r' |
            awk 'tolower($1) == "content-length:" { n = $2 } END { printf "%.0f\n", n }')
    fi
    say plan 1 "$total" "$(size_of "$part")"
    # 1 GiB stays free: an engine, its logs and Docker share that disk.
    free=$(df -Pk "$dir" 2>/dev/null | awk 'NR == 2 { printf "%.0f\n", $4 * 1024 }')
    missing=$((total - $(size_of "$part")))
    if [ -n "$free" ] && [ "$total" -gt 0 ] && [ "$missing" -gt $((free - 1073741824)) ]; then
        rm -f "$headers"
        say error "the file still to fetch takes $missing bytes and $dir has $free free" \
            "(keeping 1073741824 spare): free space, or prune with" \
            "\`servefleet models NODE --prune\`"
        exit 7
    fi
    curl -fsSL -C - -H "@$headers" -o "$part" "$url" 2>/tmp/servefleet-weights-curl &
    pid=$!
    # Checked five times a second (a short download ends without waiting), told every 2 s.
    ticks=0
    while kill -0 "$pid" 2>/dev/null; do
        sleep 0.2 2>/dev/null || sleep 1
        ticks=$((ticks + 1))
        if [ $((ticks % 10)) -eq 0 ]; then
            say progress "$(size_of "$part")" "$total"
        fi
    done
    wait "$pid"
    status=$?
    rm -f "$headers"
    say progress "$(size_of "$part")" "$total"
    if [ "$status" -ne 0 ]; then
        if grep -q -e ' 401' -e ' 403' /tmp/servefleet-weights-curl; then
            say error "the hub refused access (gated or private): the profile needs" \
                "secret_env: [HF_TOKEN] and the stack a token that may read it"
        fi
        say error "download stopped (curl exit $status:" \
            "$(head -c 300 /tmp/servefleet-weights-curl | tr '\n' ' ' | sed 's/ *$//'))"
        exit 5
    fi
    got=$(sha256sum "$part" | cut -d' ' -f1)
    if [ "$got" != "$want" ]; then
        rm -f "$part"
        say corrupt "$name" sha256
        say error "$name: sha256 $got, not the pinned $want: the download was removed"
        exit 4
    fi
    mv "$part" "$dest" || exit 6
fi
mkdir -p "$dir/.servefleet" && echo "$want $(size_of "$dest")" > "$record"
say verified 1 "$(size_of "$dest")"
