#!/bin/sh
# checkpath.sh PATH: csi-sanity's --csi.checkpathcmd (needed once
# --csi.createmountpathcmd is given): prints file, directory, not_found or
# other, as csi-sanity's own check (os.Stat) would.
if [ -f "$1" ]; then
	echo file
elif [ -d "$1" ]; then
	echo directory
elif [ -e "$1" ]; then
	echo other
else
	echo not_found
fi
