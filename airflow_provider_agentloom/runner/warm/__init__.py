"""The warm runner: a long-lived process per home that makes ``agentloom run`` fast.

:mod:`.server` is the runner, :mod:`.client` finds or starts it and hands it a command,
:mod:`.protocol` is what they share (a socket file in the home's private runner folder, checked
by both ends, and JSON messages), :mod:`.remote` runs the Python API's calls there, written as
JSON by :mod:`.shipping`. ``agentloom run --no-daemon`` (or ``AGENTLOOM_NO_DAEMON=1``) runs in
the calling process instead; ``agentloom stop`` stops a home's runner.
"""
