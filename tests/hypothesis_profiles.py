"""The suite's hypothesis profiles, chosen by $HYPOTHESIS_PROFILE (registered and loaded by
tests/conftest.py):

* `fast`, the default (`make unit`): every property test runs at most `FAST_MAX_EXAMPLES`
  examples;
* `thorough` (`make test`, which CI runs): every property test runs the examples it names
  through `examples()` (10,000 for the codec's round trip).

Neither has a deadline: how long one example takes on a shared machine is not what these
properties are about.
"""

from __future__ import annotations

import os
from typing import Final

from hypothesis import settings

#: The environment variable that names the profile.
PROFILE_VARIABLE: Final = "HYPOTHESIS_PROFILE"
FAST: Final = "fast"
THOROUGH: Final = "thorough"
#: Examples a property test runs at most under `fast` (hypothesis's own default count).
FAST_MAX_EXAMPLES: Final = 100


def profile_name() -> str:
    """The profile $HYPOTHESIS_PROFILE names, `fast` when it is unset."""
    return os.environ.get(PROFILE_VARIABLE, FAST)


def load_profile() -> None:
    """Register both profiles and load the one $HYPOTHESIS_PROFILE names.

    Raises:
        hypothesis.errors.InvalidArgument: it names neither profile.
    """
    settings.register_profile(FAST, max_examples=FAST_MAX_EXAMPLES, deadline=None)
    settings.register_profile(THOROUGH, deadline=None)
    settings.load_profile(profile_name())


def examples(thorough: int) -> int:
    """The examples of a property test that runs `thorough` of them under the thorough profile:
    all of them there, at most `FAST_MAX_EXAMPLES` under `fast`."""
    return thorough if profile_name() == THOROUGH else min(thorough, FAST_MAX_EXAMPLES)
