"""The simulated fleet: every way a simulated node differs from a real one lives here.

Each node is a network namespace with its own address, its own OpenSSH ``sshd`` and Docker
Engine (:mod:`.fleet`, :mod:`.netns`, :mod:`.sshd`, :mod:`.dockerd`); the stand-in engine
images are built locally (:mod:`.image`, build context in ``standin/``). On a node, the GPU
is answered by the stand-in ``nvidia-smi`` (:mod:`.nvidia_smi`) and the image is swapped by
the node's compose override (``compose-override.yaml.j2``, written per node by
:mod:`.inventory`). Tests use the fleet through :mod:`.testbed`.
"""
