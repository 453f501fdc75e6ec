# tap.sh -- sourced by the scripts that merge several TAP streams into one
# (per-backend.sh in a guest, cxl-test.sh on the host).
#
# tap_relay PREFIX: copies the TAP stream on stdin to stdout, numbering its
# test lines on from $tap_n with PREFIX before each description, and counts
# the failures in $tap_failed; plans are dropped (print "1..$tap_n" at the
# end); a test's reason ("# failed: ..." from pcsi_test) and "Bail out!"
# also go to stderr, which meson shows with a failure; a test's "# N took X s"
# follows its renumbering; any other line becomes a TAP comment.
tap_n=0
tap_failed=0
tap_relay() {
	local prefix=$1 line
	while IFS= read -r line; do
		case "$line" in
		"ok "* | "not ok "*)
			tap_n=$((tap_n + 1))
			case "$line" in "not ok "*) tap_failed=$((tap_failed + 1)) ;; esac
			echo "$line" | sed -E "s/^(ok|not ok) [0-9]+( - )?/\1 $tap_n - $prefix/"
			;;
		"# failed: "* | "Bail out!"*)
			echo "$line"
			echo "$prefix$line" >&2
			;;
		1..*) ;;
		"# "[0-9]*" took "*) # pcsi_test's time of the test just relayed, in the new numbering
			echo "# $tap_n took ${line#* took }"
			;;
		"#"*) echo "$line" ;;
		*) echo "# $line" ;; # a program's own output (vm-run's, a guest's): TAP comments

		esac
	done
}
