#!/bin/sh
# kinstkit's default workload for `vm-test --guest linux` (--workload FILE replaces it): fork/exec, file
# I/O and the page cache, pipes, signals, and two jobs at once so that both vCPUs run kernel code.  What it
# prints depends on nothing but its own work (no time, no pid), so a probed boot must print exactly what an
# unprobed one does.  KINSTKIT_ROUNDS (default 1) repeats it.
set -e
W=/tmp/kinstkit-workload
rm -rf "$W"
mkdir -p "$W"

# File I/O and the page cache: write, sync, read back, copy, compare.
files() {
	i=0
	while [ $i -lt 30 ]; do
		seq $((i * 100)) $((i * 100 + 400)) > "$W/$1.$i"
		i=$((i + 1))
	done
	sync
	cat "$W/$1".* | md5sum | cut -d' ' -f1
	cat "$W/$1".* | wc -l
	cp "$W/$1.0" "$W/$1.copy"
	cmp "$W/$1.0" "$W/$1.copy" && echo "$1: copy equal"
	dd if="$W/$1.1" of="$W/$1.dd" bs=64 2> /dev/null
	md5sum < "$W/$1.dd" | cut -d' ' -f1
	rm -f "$W/$1".*
}

# Pipes: chains through sort, tr, awk and gzip.
pipes() {
	seq 1 20000 | sort -rn | head -n 5 | tr '\n' ' '
	echo
	seq 1 5000 | awk '{ s += $1 * $1 } END { print s }'
	seq 1 3000 | gzip -c | gzip -dc | md5sum | cut -d' ' -f1
}

# The target module's calls through memory and through (%rip), which the kernel itself never runs
# (sys/modules/kinst/linux/target/kk_target.c); reading the file runs them.
target() {
	cat /proc/kk_target
}

# Fork and exec: many short processes.
forks() {
	n=0
	while [ $n -lt 100 ]; do
		v=$(expr $n \* 3 + 1)
		sh -c 'exit 0'
		n=$((n + 1))
	done
	echo "forks: $n, last $v"
}

# Signals: a handler counts the USR1s this shell and its children send it.
signals() {
	got=0
	trap 'got=$((got + 1))' USR1
	i=0
	while [ $i -lt 20 ]; do
		kill -USR1 $$
		sh -c "kill -USR1 $$"
		i=$((i + 1))
	done
	trap - USR1
	echo "signals: $got"
}

round=0
while [ $round -lt "${KINSTKIT_ROUNDS:-1}" ]; do
	( files a > "$W/out.a"; pipes > "$W/out.pipes" ) &
	( files b > "$W/out.b"; forks > "$W/out.forks" ) &
	signals > "$W/out.signals"
	target > "$W/out.target"
	wait
	cat "$W/out.a" "$W/out.pipes" "$W/out.b" "$W/out.forks" "$W/out.signals" "$W/out.target"
	round=$((round + 1))
done
