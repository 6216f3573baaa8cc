# SPDX-License-Identifier: Apache-2.0
"""What the Python checks of tests/train share: the rule for a missing package (skipped with exit
77 on a developer's machine, a failure under CI=true, where .ci/run installs it) and the list of
failed checks."""
import os
import sys

failures = []


def skip_or_fail(name, msg, packages):
    """Ends the check `name` because of `msg`; `packages` are the Debian packages that provide it."""
    if os.environ.get("CI") == "true":
        print("%s: %s; required in CI (.ci/run installs %s)" % (name, msg, packages))
        sys.exit(1)
    print("%s: %s; skipped (Debian: apt-get install %s)" % (name, msg, packages))
    sys.exit(77)


def check(ok, what):
    """Records a failed check (the run goes on, so one run reports them all)."""
    if not ok:
        failures.append(what)
        print("FAILED: " + what)
