# cpuos bash kernel: one code context's long-lived shell (docs/agent-protocol.md, "Code").
# cpuos-agent writes each call to fd 3 as NUL-terminated fields: an options line, NAME=value
# environment entries, an empty field, then the code. The code is eval'ed in this shell, so its
# variables, functions and working directory stay for the next call; its output goes to fd 1
# and 2, and the call ends with JSON lines on fd 4 and one EOT byte (0x04).
exec 0</dev/null
__cpuos_count=0
__cpuos_gen=
# An interrupt (the agent's timeout) ends the call, not the shell: a shell that is not
# interactive would exit on SIGINT. The trap only notes it (a `return` from a trap that ran
# after a child died of SIGINT leaves bash unable to run it again); the DEBUG trap then
# leaves the call before its next command: with extdebug, status 2 from it returns from the
# function it runs in, here up to __cpuos_cell, one function at a time.
shopt -s extdebug
__cpuos_intr=
trap '__cpuos_intr=1' INT
__cpuos_two() { return 2; }
trap '[ -z "$__cpuos_intr" ] || [[ " ${FUNCNAME[*]} " != *" __cpuos_cell "* ]] || __cpuos_two' DEBUG
__cpuos_cell() {
	eval "$__cpuos_code"
}
while IFS= read -r -d '' -u 3 __cpuos_opts; do
	while IFS= read -r -d '' -u 3 __cpuos_env && [ -n "$__cpuos_env" ]; do
		export "$__cpuos_env"
	done
	IFS= read -r -d '' -u 3 __cpuos_code || break
	# A new restore generation (resume, fork, a template snapshot): reseed $RANDOM, which
	# every copy of this memory would otherwise share.
	__cpuos_g=${__cpuos_opts#*gen=}
	__cpuos_g=${__cpuos_g%% *}
	if [ -n "$__cpuos_gen" ] && [ "$__cpuos_g" != "$__cpuos_gen" ]; then
		RANDOM=$SRANDOM
	fi
	__cpuos_gen=$__cpuos_g
	[[ " $__cpuos_opts " == *" count=0 "* ]] || __cpuos_count=$((__cpuos_count + 1))
	__cpuos_intr=
	__cpuos_cell 3<&- 4>&-
	__cpuos_status=$?
	[ -z "$__cpuos_intr" ] || __cpuos_status=130
	if [ "$__cpuos_status" != 0 ]; then
		printf '{"type": "error", "name": "ExitStatus", "value": "%d", "traceback": ""}\n' \
			"$__cpuos_status" >&4
	fi
	printf '{"type": "end", "execution_count": %d}\n\004' "$__cpuos_count" >&4
done
