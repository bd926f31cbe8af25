# kinstkit guest check library.  Sourced by guest scripts (". /meta/lib/checks.sh").
#
# POSIX sh: runs under FreeBSD's sh and busybox ash alike, using only tools
# both have (awk, grep -E, cut, timeout, date).
#
#   check NAME CMD [ARG...]   run CMD, output to $KINSTKIT_OUT/NAME.out, judge it
#   skip NAME REASON          record that NAME was not run, and why
#
# Each check is judged against its line in $KINSTKIT_META/expect.tsv
# (tab-separated; "-" for an empty field; lines starting with # are comments):
#
#   NAME  EXIT  LIMIT  MATCH  REJECT
#
#   EXIT    the exit status wanted ("*": any)
#   LIMIT   seconds the command may take (timeout(1)); "-": no limit of its own
#   MATCH   an extended regular expression some output line must match
#   REJECT  an extended regular expression no output line may match
#
# A check without a spec line passes on exit status 0.  Every verdict is one
# line of $KINSTKIT_OUT/checks.tsv: NAME, pass|fail|skip, exit status, reason.
# The host reads that file back from the meta disk; a spec'd check missing
# from it is reported as an error (the script died before running it).

KINSTKIT_META=${KINSTKIT_META:-/meta}
KINSTKIT_OUT=${KINSTKIT_OUT:-$KINSTKIT_META/out}
mkdir -p "$KINSTKIT_OUT"
kk_tab=$(printf '\t')

kk_record() {
	printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$KINSTKIT_OUT/checks.tsv"
	if [ -n "$4" ]; then
		echo "check $1: $2 (exit $3): $4"
	else
		echo "check $1: $2 (exit $3)"
	fi
}

# kk_spec NAME: set kk_exit kk_limit kk_match kk_reject from expect.tsv.
kk_spec() {
	kk_exit=0 kk_limit=- kk_match=- kk_reject=-
	[ -f "$KINSTKIT_META/expect.tsv" ] || return 0
	kk_line=$(awk -F'\t' -v n="$1" '$1 == n { print; exit }' "$KINSTKIT_META/expect.tsv")
	[ -n "$kk_line" ] || return 0
	IFS=$kk_tab read -r kk_name kk_exit kk_limit kk_match kk_reject <<EOF
$kk_line
EOF
	: "${kk_exit:=0}" "${kk_limit:=-}" "${kk_match:=-}" "${kk_reject:=-}"
}

check() {
	kk_check_name=$1
	shift
	kk_spec "$kk_check_name"
	kk_out=$KINSTKIT_OUT/$kk_check_name.out
	if [ "$kk_limit" = "-" ]; then
		"$@" > "$kk_out" 2>&1 < /dev/null
	else
		timeout "$kk_limit" "$@" > "$kk_out" 2>&1 < /dev/null
	fi
	kk_rc=$?
	# timeout(1) exits 124 (FreeBSD, GNU); busybox's passes on the SIGTERM (143).
	if [ "$kk_limit" != "-" ] && { [ "$kk_rc" -eq 124 ] || [ "$kk_rc" -eq 143 ]; }; then
		kk_record "$kk_check_name" fail "$kk_rc" "timed out after ${kk_limit}s"
	elif [ "$kk_exit" != "*" ] && [ "$kk_rc" != "$kk_exit" ]; then
		kk_record "$kk_check_name" fail "$kk_rc" "exit status $kk_rc, expected $kk_exit"
	elif [ "$kk_match" != "-" ] && ! grep -Eq -- "$kk_match" "$kk_out"; then
		kk_record "$kk_check_name" fail "$kk_rc" "no output line matches /$kk_match/"
	elif [ "$kk_reject" != "-" ] && grep -Eq -- "$kk_reject" "$kk_out"; then
		kk_record "$kk_check_name" fail "$kk_rc" "an output line matches /$kk_reject/"
	else
		kk_record "$kk_check_name" pass "$kk_rc" ""
	fi
	return 0
}

skip() {
	: > "$KINSTKIT_OUT/$1.out"
	kk_record "$1" skip - "$2"
}
