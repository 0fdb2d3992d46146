#!/usr/bin/env bash
# Image ENTRYPOINT of the DSpark engine stand-in (docs/wrapper-reference.md §4.2).
#
#   dspark-entrypoint.sh audit                      run the runtime audit only
#   dspark-entrypoint.sh vllm ... serve ...         audit, then exec the command
#   dspark-entrypoint.sh bash -lc '<script>'        the script must run "$VLLM_BIN" ... serve
#
# Refusals exit 64 with a message on stderr: no arguments, any other command form, env
# KV_CACHE_DTYPE not nvfp4_ds_mla, or not exactly one --kv-cache-dtype argument (also
# --kv_cache_dtype and the =value forms; for bash -lc, inside the script) whose value is
# nvfp4_ds_mla ("$KV_CACHE_DTYPE" in a script counts as the env value).  A failing audit's exit
# code propagates.
set -uo pipefail

HERE="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)"
ENGINE_PATH="${HERE}/..:/opt/dspark-engine"

refuse() {
    echo "dspark-entrypoint: $*" >&2
    echo "usage: dspark-entrypoint.sh audit | vllm ... serve ... | bash -lc '<script running \"\$VLLM_BIN\" ... serve>'" >&2
    exit 64
}

audit() {
    PYTHONPATH="${ENGINE_PATH}${PYTHONPATH:+:$PYTHONPATH}" python3 -m dspark_engine.audit "$@"
}

[ $# -gt 0 ] || refuse "no command given"

if [ "$1" = audit ]; then
    shift
    audit "$@"
    exit $?
fi

kv_count=0
kv_values=()

strip_quotes() {
    local v="$1"
    v="${v#\"}"; v="${v%\"}"; v="${v#\'}"; v="${v%\'}"
    # The patterns are the literal text "$KV_CACHE_DTYPE" / "${KV_CACHE_DTYPE}" of a script, not expansions.
    # shellcheck disable=SC2016
    case "$v" in
        '$KV_CACHE_DTYPE'|'${KV_CACHE_DTYPE}') v="${KV_CACHE_DTYPE:-}" ;;
    esac
    printf '%s' "$v"
}

if [ "$(basename -- "$1")" = vllm ]; then
    serve=0
    args=("$@")
    for ((i = 1; i < $#; i++)); do
        arg="${args[i]}"
        case "$arg" in
            serve) serve=1 ;;
            --kv-cache-dtype|--kv_cache_dtype)
                kv_count=$((kv_count + 1)); kv_values+=("${args[i + 1]:-}") ;;
            --kv-cache-dtype=*|--kv_cache_dtype=*)
                kv_count=$((kv_count + 1)); kv_values+=("${arg#*=}") ;;
        esac
    done
    [ "$serve" = 1 ] || refuse "the vllm command must be 'vllm ... serve ...'"
elif [ "$(basename -- "$1")" = bash ] && [ "${2:-}" = -lc ]; then
    [ $# -eq 3 ] || refuse "bash -lc takes exactly one script argument (got $(($# - 2)))"
    script="$3"
    bin_serve='VLLM_BIN.*[^[:alnum:]_-]serve([^[:alnum:]_-]|$)'
    [[ $script =~ $bin_serve ]] || refuse "the bash -lc script must run \"\$VLLM_BIN\" ... serve"
    kv_re="(^|[[:space:]\"'])--kv[-_]cache[-_]dtype[\"']?(=|[[:space:]]+)([^[:space:];]*)(.*)"
    rest="$script"
    while [[ $rest =~ $kv_re ]]; do
        kv_count=$((kv_count + 1))
        kv_values+=("$(strip_quotes "${BASH_REMATCH[3]}")")
        rest="${BASH_REMATCH[4]}"
    done
else
    refuse "unsupported command '$1': only 'vllm ... serve ...' or 'bash -lc \"<script>\"' are accepted"
fi

[ "${KV_CACHE_DTYPE:-}" = nvfp4_ds_mla ] \
    || refuse "env KV_CACHE_DTYPE must be nvfp4_ds_mla (got '${KV_CACHE_DTYPE:-<unset>}')"
[ "$kv_count" -eq 1 ] \
    || refuse "exactly one --kv-cache-dtype argument is required (found ${kv_count})"
[ "${kv_values[0]}" = nvfp4_ds_mla ] \
    || refuse "--kv-cache-dtype must be nvfp4_ds_mla (got '${kv_values[0]}')"

audit || exit $?
exec "$@"
