"""The Linux process floor: system calls, process trees, the reaper and running ``sh -c`` safely.

Standard library only and loadable by path (the reaper runs under ``python -I -S``); tools, the runner and serve stand on it.
"""
