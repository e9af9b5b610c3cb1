#!/bin/bash
# Runs a command (mpirun and its arguments) with an Open MPI session directory of its own, removed afterwards.
# Open MPI 4.1 makes its session directory /tmp/ompi.HOST.UID with a check, then a mkdir that fails when the
# directory appeared in between; meson test starts these tests two at a time, and two mpirun starting together
# failed that way in CI ("A call to mkdir was unable to create the desired directory ... File exists", orte_init
# failed, the test's ranks never ran). Usage: mpirun_private.sh COMMAND ARGS...
set -u
base=$(mktemp -d "${TMPDIR:-/tmp}/kiln-ompi.XXXXXX") || exit 1
trap 'rm -rf "$base"' EXIT
OMPI_MCA_orte_tmpdir_base=$base "$@"
