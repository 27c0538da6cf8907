#!/bin/sh
# Helm 3 post-renderer as a script, for when extra flags are easier to keep in a file than in
# --post-renderer-args: `helm upgrade ... --post-renderer ./post-renderer.sh`. (Helm 3 also
# runs the binary itself: --post-renderer passmower-elector --post-renderer-args inject.)
exec passmower-elector inject "$@"
