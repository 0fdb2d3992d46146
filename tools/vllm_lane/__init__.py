"""The real-vLLM lane (``make test-vllm``): a pinned vLLM CPU build in its own cached virtualenv, a
tiny random model made on this machine, one real ``vllm serve`` on 127.0.0.1, and the pieces the
tests in ``tests/vllm`` use to hold the collection's own clients (and the engine stand-in) to it.

Modules:

- :mod:`.install`  the virtualenv (cached per pinned requirements, stamped after a self-check)
- :mod:`.model`    the tiny model and its locally trained tokenizer (run inside that virtualenv)
- :mod:`.vllm_main` the wrapper that starts vLLM's command line under the CPU distribution's name
- :mod:`.server`   starting and stopping the real server and the stand-in pair
- :mod:`.contract` the requests sent to both servers and how their answers are compared
- :mod:`.accepted` the one table of accepted differences between the stand-in and the real server
- :mod:`.report`   ``artifacts/reports/VLLM.md``

Nothing here downloads anything at run time; only the install step asks the package index.
"""
