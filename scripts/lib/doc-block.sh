# Blocks of a generated Markdown file that another script measures: the
# lines between `<!-- NAME:begin -->` and `<!-- NAME:end -->`. Sourced by
# scripts/bench-report.sh (which keeps them across a regeneration),
# scripts/bench-serve.sh and scripts/bench-criterion.sh (which write them).

# Print block NAME of FILE, markers excluded; nothing if FILE has none.
doc_block_extract() {
    local name=$1 file=$2
    [[ -f $file ]] || return 0
    awk -v begin="<!-- $name:begin -->" -v end="<!-- $name:end -->" '
        $0 == end { inside = 0 }
        inside { print }
        $0 == begin { inside = 1 }
    ' "$file"
}

# Replace block NAME of FILE with the Markdown in SECTION. A file without
# the block gets it before the first line equal to one of the ANCHORS, or
# at the end.
doc_block_splice() {
    local name=$1 section=$2 file=$3 tmp
    shift 3
    if [[ ! -s $section ]]; then
        echo "doc-block: $section is empty; $file left alone" >&2
        return 1
    fi
    [[ -f $file ]] || : >"$file"
    tmp=$(mktemp "$file.XXXXXX")
    awk -v begin="<!-- $name:begin -->" -v end="<!-- $name:end -->" -v section="$section" \
        -v anchors="$(printf '%s\n' "$@")" '
        BEGIN { n_anchors = split(anchors, anchor, "\n") }
        function emit(   n, i, lines, line) {
            n = 0
            while ((getline line < section) > 0) lines[++n] = line
            close(section)
            while (n > 0 && lines[n] == "") n--
            print begin
            for (i = 1; i <= n; i++) print lines[i]
            print end
            done = 1
        }
        function is_anchor(line,   i) {
            for (i = 1; i <= n_anchors; i++) if (anchor[i] != "" && line == anchor[i]) return 1
            return 0
        }
        $0 == begin { if (!done) emit(); skipping = 1; next }
        skipping { if ($0 == end) skipping = 0; next }
        !done && is_anchor($0) { emit(); print "" }
        { print }
        END {
            if (!done) {
                if (NR > 0) print ""
                emit()
            }
        }
    ' "$file" >"$tmp"
    mv "$tmp" "$file"
}
