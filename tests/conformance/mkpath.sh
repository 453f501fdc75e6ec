#!/bin/sh
# mkpath.sh PATH: csi-sanity's --csi.createmountpathcmd / --csi.createstagingpathcmd.
# Prints a new, empty directory PATH.XXXXXX for each spec, so that a mount a
# failed spec leaves behind cannot make the next specs fail in their set-up.
exec mktemp -d "$1.XXXXXX"
