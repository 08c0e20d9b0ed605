"""The Linux process floor: system calls, process trees, the reaper, ``sh -c`` leaving nothing behind.

Standard library only, loadable by path (the reaper runs under ``python -I -S``); tools, runner, serve use it.
"""
