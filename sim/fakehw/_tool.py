"""What every fake tool's ``main`` does around its ``_run``: no tracebacks, quiet broken pipes."""
import sys


def run_tool(run, argv, on_error):
    """Call ``run(argv, stdout, stderr)``; a crash becomes ``on_error(exc)``'s exit code."""
    if argv is None:
        argv = sys.argv[1:]
    try:
        code = run(list(argv), sys.stdout, sys.stderr)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        try:
            sys.stdout = open("/dev/null", "w")
        except OSError:
            pass
        return 0
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # never show a traceback to callers
        return on_error(exc)
