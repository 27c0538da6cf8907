#!/bin/sh
# Helm 3 post-renderer: Helm pipes the rendered release to stdin and installs what comes out.
# Extra flags (e.g. --workload-only when the passmower-elector chart provides the RBAC) can be
# passed with --post-renderer-args or through ELECTOR_* variables.
exec passmower-elector inject "$@"
