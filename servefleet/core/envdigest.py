"""The one env-file hasher: the form of ``engine.env`` whose sha256 is published.

``engine.env`` holds the engine's secrets (every assignment in it is a secret), and its
sha256 is published in ``manifest.json`` (0644 on the node), the plan's JSON and Pulumi's
outputs. A plain sha256 of a secret lets anyone holding the digest test guesses offline, so
the published form keeps the secret *names* and drops the values: each ``NAME=value``
becomes ``NAME=(set)``, an empty ``NAME=`` placeholder stays as it is, and comments and
blank lines are left out (they change nothing the engine sees, and a hand-written comment
could hold anything).

Why not a keyed hash (HMAC with a per-node key kept on the node): the control machine would
need each node's key before every render, so ``render``, ``validate`` and a Pulumi preview
could not name a release offline, and the key would be one more secret to create, store and
rotate. What the published form still shows: a variable added, removed, emptied or
filled on the node, which is what the plan's "edited on the node" check and drift compare by
file hash. A secret *value* changed by hand is seen by drift in the container's
environment, hashed on the node and compared on the control machine, never written down.
Nothing here depends on the value, so a rotated secret does not name a new release.

A rotated secret is found instead by :func:`keyed_value_digests`: the controller sends a
random key with each observation, the node answers with an HMAC-SHA256 per variable of its
``engine.env`` under that key, and the controller compares them with the same HMACs of the
file it renders. The key lives only in the controller's memory for that one comparison, so
nothing written down (manifest, plan, outputs, logs) lets anyone test guesses offline.

This module is also sent to the node with the drift collector
(:func:`servefleet.adapters.drift_collect.collector_source` appends it), so it keeps to
what the collector may use: the standard library only, syntax Python 3.7 accepts, no
``from __future__`` import and no annotation evaluated at run time.
"""

SECRET_SET = "(set)"
"""What replaces a secret value in the published form."""


def _lines(content):  # type: (bytes) -> list
    """``(line, name, "=", value)`` per line of an env file that is neither blank nor a
    comment, in file order; ``("", "")`` for the last two where the line assigns nothing."""
    found = []
    for line in content.decode("utf-8", "surrogateescape").splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            name, sep, value = line.partition("=")
            found.append((line, name, sep, value))
    return found


def hashed_env_text(content):  # type: (bytes) -> bytes
    """The published form of an env file (see the module docstring): ``NAME=(set)`` or
    ``NAME=`` per assignment, in file order, one per line. Works on a rendered file and on
    the node's copy alike; bytes that are not UTF-8 are kept as they are."""
    out = []
    for line, name, sep, value in _lines(content):
        if not sep:
            out.append(line)  # not an assignment: kept, so a stray line is still seen
            continue
        out.append(name + "=" + (SECRET_SET if value != "" else ""))
    text = "\n".join(out) + "\n" if out else ""
    return text.encode("utf-8", "surrogateescape")


def keyed_value_digests(content, key):  # type: (bytes, bytes) -> list
    """``(NAME, hex HMAC-SHA256 under key of NAME=<value as written>)`` per assignment of an
    env file, in file order (see the module docstring). The value is taken as the file
    writes it (quotes included): the rendered file and the node's copy of it compare equal
    exactly when the node holds what would be rendered."""
    import hashlib
    import hmac
    found = []
    for line, name, sep, _value in _lines(content):
        if not sep:
            continue
        digest = hmac.new(key, line.encode("utf-8", "surrogateescape"), hashlib.sha256)
        found.append((name.strip(), digest.hexdigest()))
    return found
