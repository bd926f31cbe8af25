#!/bin/sh
# kinstkit's default checks in a FreeBSD guest (run as /meta/run.sh).
#
# Loads the modules kinstkit built (build/<kernel-build-id>/*.ko, in the meta
# disk's modules/), checks what dtrace(1) lists, runs the examples of
# dtrace_kinst(4) and dtrace_dtmalloc(4) for a few seconds under load, checks
# the shape of their output, unloads, and records every exit status.  The
# verdicts come from expect.tsv beside this file (format: lib/checks.sh).
#
# dtrace is loaded by itself, never through dtraceall: dtraceall would pull in
# the stock kinst and dtmalloc, whose names ours share.
. "${KINSTKIT_META:-/meta}/lib/checks.sh"

mods=$KINSTKIT_META/modules
seconds=${KINSTKIT_LOAD_SECONDS:-4}

# Page faults and malloc(9) traffic for the probes to see, for $1 seconds:
# fork/exec and directory walks fault pages in and allocate.
load=${TMPDIR:-/tmp}/kinstkit-load.sh
cat > "$load" <<'LOAD'
end=$(($(date +%s) + $1))
while [ "$(date +%s)" -lt "$end" ]; do
	ls -laR /etc /usr/share/misc > /dev/null 2>&1
done
LOAD

have() { [ -f "$mods/$1.ko" ]; }

check dtrace-load sh -c 'kldstat -q -m dtrace || kldload dtrace'
# The stock providers must be out: ours take their names.
check stock-providers-out sh -c '
	for m in dtraceall kinst dtmalloc; do
		if kldstat -q -m "$m"; then
			kldunload "$m" || exit 1
		fi
	done
	echo "stock kinst and dtmalloc not loaded"'

for ko in "$mods"/*.ko; do
	[ -f "$ko" ] || continue
	check "load-$(basename "$ko" .ko)" kldload "$ko"
done
for name in kinst dtmalloc; do
	have "$name" || skip "load-$name" "no $name.ko in the meta disk"
done
check kldstat kldstat -v

if have kinst; then
	# kinst probes are made per named function, as in stock kinst:
	# `dtrace -l -P kinst` lists none until a description names one.
	check kinst-list dtrace -l -n 'kinst::vm_fault:'
	# dtrace_kinst(4): kinst::vm_fault:4 { printf("%#x", regs[R_RSI]); }
	check kinst-vm-fault sh -c '
		sh "$1" "$2" &
		dtrace -n "kinst::vm_fault:4 { printf(\"%#x\", regs[R_RSI]); } tick-${2}s { exit(0); }"
		rc=$?
		wait
		exit $rc' sh "$load" "$seconds"
else
	skip kinst-list "no kinst.ko in the meta disk"
	skip kinst-vm-fault "no kinst.ko in the meta disk"
fi

if have dtmalloc; then
	check dtmalloc-list dtrace -l -P dtmalloc
	# The listing kinstkit predicted (malloc-types --list) against the real
	# one, module/function/name columns only (probe IDs are the framework's).
	if [ -f "$mods/dtmalloc.list" ]; then
		check dtmalloc-listing sh -c '
			cols() { awk '\''$2 == "dtmalloc" { print $3, $4, $5 }'\'' | sort; }
			cols < "$1" > "$2.expected"
			dtrace -l -P dtmalloc | cols > "$2.listed"
			if cmp -s "$2.expected" "$2.listed"; then
				echo "listing matches: $(wc -l < "$2.listed" | tr -d " ") probes"
			else
				diff "$2.expected" "$2.listed"
				exit 1
			fi' sh "$mods/dtmalloc.list" "${TMPDIR:-/tmp}/kinstkit-dtmalloc"
	else
		skip dtmalloc-listing "no dtmalloc.list in the meta disk"
	fi
	# dtrace_dtmalloc(4): count malloc(9) calls per type.
	check dtmalloc-count sh -c '
		sh "$1" "$2" &
		dtrace -n "dtmalloc:::malloc { @[probefunc] = count(); } tick-${2}s { exit(0); }"
		rc=$?
		wait
		exit $rc' sh "$load" "$seconds"
else
	skip dtmalloc-list "no dtmalloc.ko in the meta disk"
	skip dtmalloc-listing "no dtmalloc.ko in the meta disk"
	skip dtmalloc-count "no dtmalloc.ko in the meta disk"
fi

# Unload in the reverse order of loading.
for ko in $(ls -r "$mods"/*.ko 2>/dev/null); do
	name=$(basename "$ko" .ko)
	check "unload-$name" kldunload "$name"
done
for name in kinst dtmalloc; do
	have "$name" || skip "unload-$name" "no $name.ko in the meta disk"
done
check modules-gone sh -c '
	for m in kinst dtmalloc; do
		if kldstat -q -m "$m"; then
			echo "$m still loaded"
			exit 1
		fi
	done
	echo "kinst and dtmalloc unloaded"'
exit 0
