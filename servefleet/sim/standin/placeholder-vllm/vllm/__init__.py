# SPDX-License-Identifier: Apache-2.0
"""Placeholder for the vLLM package inside servefleet's simulated-node image.

Only the files a patch overlay touches are real vLLM 0.21.0 sources (Apache-2.0), at
their real paths, so ``git apply -p1`` run from dist-packages patches them for real.
Nothing here runs; the stand-in engine reads the installed files to see whether an
overlay was applied.
"""

__version__ = "0.21.0"
__version_tuple__ = (0, 21, 0)
