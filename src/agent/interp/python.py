"""cpuos python kernel: one code context's long-lived interpreter (docs/agent-protocol.md, "Code").

cpuos-agent starts it on a context's first use and writes each call to fd 3: NUL-terminated fields,
an options line ("gen=N formats=png,svg"), NAME=value environment entries, an empty field, then the
code. The code runs as a notebook cell in one namespace that lives as long as the process; what it
prints goes to fd 1 and 2 as it is written, and what it produces besides (results, the error) goes
to fd 4 as JSON lines, closed by one EOT byte (0x04) once the call is over. JSON escapes every
control character, so that byte never appears inside a line. Nothing here trusts the code: whatever
it raises, the kernel answers and waits for the next call.
"""

import ast
import asyncio
import base64
import builtins
import io
import json
import linecache
import os
import random
import signal
import subprocess
import sys
import tokenize
import traceback
import types
import weakref

REQ_FD, EV_FD = 3, 4
EOT = b"\x04"
MAX_REPR = 1 << 20  # a text representation is cut past this many characters

# The mime types a result can carry and the key each has in the API; binary ones are base64.
MIME_KEYS = {
    "text/plain": "text", "text/html": "html", "text/markdown": "markdown",
    "image/svg+xml": "svg", "text/latex": "latex", "application/javascript": "javascript",
    "application/json": "json", "image/png": "png", "image/jpeg": "jpeg", "application/pdf": "pdf",
}
BINARY = {"image/png", "image/jpeg", "application/pdf"}
REPR_METHODS = {
    "text/html": "_repr_html_", "text/markdown": "_repr_markdown_", "image/svg+xml": "_repr_svg_",
    "text/latex": "_repr_latex_", "application/javascript": "_repr_javascript_",
    "application/json": "_repr_json_", "image/png": "_repr_png_", "image/jpeg": "_repr_jpeg_",
    "application/pdf": "_repr_pdf_",
}


def emit(event):
    """Writes one JSON line to the agent (fd 4), whole even if the pipe takes it in parts."""
    data = json.dumps(event).encode() + b"\n"
    while data:
        data = data[os.write(EV_FD, data):]


class Kernel:
    def __init__(self):
        self.count = 0
        self.gen = None
        self.formats = ("png",)
        self.executing = False
        self.loop = None
        self.pending = b""
        self.saved = weakref.WeakKeyDictionary()  # figure -> the PNG a savefig wrote of it
        # The cell namespace is a module of its own, __main__ for pickle and for
        # `if __name__ == "__main__"`; the kernel keeps its own globals apart.
        main = types.ModuleType("__main__")
        main.__dict__["__builtins__"] = builtins
        sys.modules["__main__"] = main
        self.ns = main.__dict__
        builtins.display = self.display
        builtins._cpuos_shell = shell

    # --- requests ---

    def read_fields(self, n):
        """The next n NUL-terminated fields from fd 3; None at end of file (the agent is gone)."""
        fields = []
        while len(fields) < n:
            cut = self.pending.find(b"\0")
            if cut >= 0:
                fields.append(self.pending[:cut])
                self.pending = self.pending[cut + 1:]
                continue
            chunk = os.read(REQ_FD, 1 << 16)
            if not chunk:
                return None
            self.pending += chunk
        return fields

    def next_call(self):
        """Reads one call: (options, env dict, code), or None at end of file."""
        head = self.read_fields(1)
        if head is None:
            return None
        opts = dict(kv.split("=", 1) for kv in head[0].decode().split() if "=" in kv)
        env = {}
        while True:
            field = self.read_fields(1)
            if field is None:
                return None
            if not field[0]:
                break
            name, _, value = field[0].decode("utf-8", "surrogateescape").partition("=")
            env[name] = value
        code = self.read_fields(1)
        if code is None:
            return None
        return opts, env, code[0].decode("utf-8", "replace")

    def serve(self):
        while True:
            call = self.next_call()
            if call is None:
                return
            opts, env, code = call
            self.prepare(opts, env)
            try:
                self.run(code, counted=opts.get("count") != "0")
            finally:
                flush_std()
                emit({"type": "end", "execution_count": self.count})
                os.write(EV_FD, EOT)

    def prepare(self, opts, env):
        """Applies a call's options and the sandbox's environment before its code runs."""
        gen = opts.get("gen")
        # A new restore generation: this memory was restored (resume, fork, a template
        # snapshot), so every copy of it would draw the same "random" numbers.
        if self.gen is not None and gen != self.gen:
            random.seed()
            numpy = sys.modules.get("numpy")
            if numpy is not None:
                try:
                    numpy.random.seed()
                except Exception:
                    pass
        self.gen = gen
        self.formats = tuple(f for f in opts.get("formats", "png").split(",") if f in ("png", "svg")) or ("png",)
        os.environ.update(env)

    # --- running a cell ---

    def run(self, code, counted=True):
        """Runs one cell; one not counted (the host warming this kernel) leaves no count and no
        `_` behind."""
        if counted:
            self.count += 1
        name = f"<cell {self.count}>" if counted else "<warm>"
        linecache.cache[name] = (len(code), None, code.splitlines(True), name)
        value, error = None, None
        try:
            body, last = self.compile(code, name)
            self.execute(body)
            if last is not None:
                value = self.execute(last)
        except BaseException as e:  # noqa: B902 -- the cell's exceptions are results
            error = e
        self.executing = False
        if error is not None:
            emit(error_event(error))
        elif value is not None and not ends_with_semicolon(code):
            if counted:
                self.ns["_"] = value
            self.display_value(value, main=True)
        self.flush_figures()

    def compile(self, code, name):
        """The cell as a code object for all but its last line, and one for that line when it
        is an expression (its value is the main result)."""
        flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        try:
            tree = compile(code, name, "exec", ast.PyCF_ONLY_AST | flags)
        except SyntaxError as e:
            # Models write notebook lines too (`!pip install x`, `%matplotlib inline`), but a
            # string may hold such a line: read as those only when the cell is not Python.
            shell = notebook_lines(code)
            if shell == code:
                raise
            try:
                tree = compile(shell, name, "exec", ast.PyCF_ONLY_AST | flags)
            except SyntaxError:
                raise e from None
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            expr = ast.Expression(tree.body.pop().value)
            last = compile(expr, name, "eval", flags)
        return compile(tree, name, "exec", flags), last

    def execute(self, code):
        self.executing = True
        try:
            result = eval(code, self.ns)
            if code.co_flags & 0x80:  # CO_COROUTINE: a top-level await
                if self.loop is None:
                    self.loop = asyncio.new_event_loop()
                result = self.loop.run_until_complete(result)
            return result
        finally:
            self.executing = False

    def on_sigint(self, signo, frame):
        # The agent interrupts a call past its timeout; between calls there is nothing to stop.
        if self.executing:
            raise KeyboardInterrupt

    # --- results ---

    def display(self, *objs, **kwargs):
        """display(obj, ...): each object as a result of the call, as a notebook shows it."""
        for obj in objs:
            self.display_value(obj, main=False)

    def display_value(self, obj, main):
        pyplot = sys.modules.get("matplotlib.pyplot")
        figure = sys.modules.get("matplotlib.figure")
        if figure is not None and isinstance(obj, figure.Figure):
            self.emit_figure(obj, main)
            if pyplot is not None:
                pyplot.close(obj)
            return
        emit(dict(type="result", is_main_result=main, **mime_bundle(obj)))

    def emit_figure(self, fig, main=False):
        data = {"text": cut(repr(fig))}
        for fmt in self.formats:
            kept = self.saved.get(fig) if fmt == "png" and not fig.stale else None
            if kept is not None:
                data["png"] = base64.b64encode(kept).decode()
                continue
            buf = io.BytesIO()
            try:
                # Not bbox_inches="tight": that draws the figure twice, a second under TCG.
                fig.savefig(buf, format=fmt)
            except Exception as e:
                print(f"cannot render the figure as {fmt}: {e}", file=sys.stderr)
                continue
            raw = buf.getvalue()
            data[fmt] = base64.b64encode(raw).decode() if fmt == "png" else raw.decode("utf-8", "replace")
        emit(dict(type="result", is_main_result=main, **data))

    def flush_figures(self):
        """Every figure still open at the end of a call is a result, then closed."""
        pyplot = sys.modules.get("matplotlib.pyplot")
        if pyplot is None:
            return
        try:
            nums = pyplot.get_fignums()
        except Exception:
            return
        for num in nums:
            try:
                self.emit_figure(pyplot.figure(num))
            except Exception as e:
                print(f"cannot render figure {num}: {e}", file=sys.stderr)
        try:
            pyplot.close("all")
        except Exception:
            pass

    def show(self, *args, **kwargs):
        """plt.show(): the open figures become results now, as in a notebook."""
        self.flush_figures()


def cut(text):
    return text if len(text) <= MAX_REPR else text[:MAX_REPR] + "..."


def mime_bundle(obj):
    """An object's representations, keyed as the API names them."""
    out = {}
    bundle = {}
    method = getattr(obj, "_repr_mimebundle_", None)
    if callable(method):
        try:
            got = method()
            if isinstance(got, tuple):
                got = got[0]
            if isinstance(got, dict):
                bundle.update(got)
        except Exception:
            pass
    for mime, name in REPR_METHODS.items():
        if mime in bundle:
            continue
        method = getattr(obj, name, None)
        # A class (not an instance) has these as unbound functions: not representations.
        if not callable(method) or isinstance(obj, type):
            continue
        try:
            got = method()
        except Exception:
            continue
        if isinstance(got, tuple):
            got = got[0]
        if got is not None:
            bundle[mime] = got
    for mime, value in bundle.items():
        key = MIME_KEYS.get(mime)
        if key is None:
            continue
        if mime in BINARY:
            if isinstance(value, str):
                value = value.encode("ascii", "ignore")
            if isinstance(value, (bytes, bytearray)):
                out[key] = base64.b64encode(value).decode() if not is_base64(value) else value.decode()
        elif mime == "application/json":
            try:
                json.dumps(value)
                out[key] = value
            except (TypeError, ValueError):
                pass
        elif isinstance(value, str):
            out[key] = cut(value)
    if "text" not in out:
        try:
            out["text"] = cut(repr(obj))
        except Exception as e:
            out["text"] = f"<repr failed: {type(e).__name__}>"
    return out


def is_base64(value):
    """Whether bytes a _repr_png_ gave are base64 already (some libraries give text)."""
    return not value.startswith((b"\x89PNG", b"\xff\xd8", b"%PDF")) and all(
        c in b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=\n" for c in value[:64])


def error_event(e):
    """The error of a call: name, value and the traceback from the cell's own frames."""
    lines = []
    if not isinstance(e, SyntaxError):
        # The cell's frames only: not the kernel's that ran it, nor its interrupt handler.
        frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename != __file__]
        if frames:
            lines = ["Traceback (most recent call last):\n"] + traceback.format_list(frames)
    lines += traceback.format_exception_only(type(e), e)
    try:
        value = str(e)
    except Exception:
        value = "<str failed>"
    return {"type": "error", "name": type(e).__name__, "value": cut(value), "traceback": cut("".join(lines))}


def notebook_lines(code):
    """The cell with its notebook lines made Python: `!cmd` and `%pip`/`%conda` run in a shell,
    `%cd DIR` changes directory, other `%magics` are dropped."""
    out, quote = [], None
    for line in code.splitlines():
        body = line.lstrip()
        indent = line[:len(line) - len(body)]
        if quote:
            pass  # inside a triple-quoted string: text, not a command
        elif body.startswith("!"):
            line = f"{indent}_cpuos_shell({body[1:]!r})"
        elif body.startswith(("%pip ", "%conda ")):
            line = f"{indent}_cpuos_shell({body[1:]!r})"
        elif body.startswith("%cd "):
            line = f"{indent}__import__('os').chdir({body[4:].strip()!r})"
        elif body.startswith("%"):
            line = f"{indent}pass"
        for i in range(len(line) - 2):  # where triple-quoted strings open and close
            if line[i:i + 3] in ('"""', "'''") and (quote is None or quote == line[i:i + 3]):
                quote = None if quote else line[i:i + 3]
        out.append(line)
    return "\n".join(out)


def shell(cmd):
    """A notebook's `!cmd`: run by /bin/sh, its output the cell's, its status in `_exit_code`."""
    flush_std()
    status = subprocess.run(cmd, shell=True).returncode
    sys.modules["__main__"].__dict__["_exit_code"] = status


def ends_with_semicolon(code):
    """A notebook's rule: a last line ending in ';' shows no value."""
    last = None
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                                tokenize.DEDENT, tokenize.ENDMARKER):
                last = tok
    except (tokenize.TokenError, SyntaxError):
        return False
    return last is not None and last.type == tokenize.OP and last.string == ";"


def flush_std():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


def keep_png(saved, savefig):
    """Figure.savefig, keeping what a save to a .png file wrote (in saved, by figure), so that a
    figure saved and not changed since is given as that image instead of being drawn again."""

    def save(fig, fname, *args, **kwargs):
        saved.pop(fig, None)
        if args or not isinstance(fname, (str, os.PathLike)) or kwargs.get("format") not in (None, "png") \
                or not os.fspath(fname).lower().endswith(".png"):
            return savefig(fig, fname, *args, **kwargs)
        buf = io.BytesIO()
        savefig(fig, buf, **dict(kwargs, format="png"))
        with open(fname, "wb") as f:
            f.write(buf.getvalue())
        # savefig sets and restores the figure's colours, which leaves it stale: the image is
        # of the figure as it is, and a change from now on makes it stale again.
        fig.stale = False
        saved[fig] = buf.getvalue()
        return None

    return save


class PyplotHook:
    """Before matplotlib.pyplot is first imported, points its Agg backend at one whose show()
    hands the figures to the kernel. A backend the code chose itself (other than Agg) stays."""

    def __init__(self, kernel):
        self.kernel = kernel

    def find_spec(self, name, path=None, target=None):
        if name != "matplotlib.pyplot":
            return None
        sys.meta_path.remove(self)
        try:
            import matplotlib
            from matplotlib.backends import backend_agg
            # Read without resolving it: resolving an automatic backend imports pyplot.
            backend = dict.__getitem__(matplotlib.rcParams, "backend")
            if isinstance(backend, str) and backend.lower() == "agg":
                mod = types.ModuleType("cpuos_inline")
                mod.FigureCanvas = type("FigureCanvas", (backend_agg.FigureCanvasAgg,), {
                    # Nothing is on a screen: a figure is drawn when it is saved or shown, not
                    # again after each plt.savefig, which asks for a redraw this way.
                    "draw_idle": lambda self, *args, **kwargs: None})
                mod.FigureManager = backend_agg.FigureManagerBase
                mod.show = self.kernel.show
                sys.modules["cpuos_inline"] = mod
                matplotlib.use("module://cpuos_inline")
            import matplotlib.figure
            figure = matplotlib.figure.Figure
            figure.savefig = keep_png(self.kernel.saved, figure.savefig)
        except Exception as e:
            print(f"cpuos kernel: matplotlib's show() will not show figures: {e}", file=sys.stderr)
        return None


def main():
    for fd in (REQ_FD, EV_FD):
        os.set_inheritable(fd, False)  # the code's child processes do not get them
    # Output goes out line by line as the code prints it (and whole at the end of a call).
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(line_buffering=True)
    # The script's directory is ours; the code's modules come from its working directory.
    sys.path[0] = ""
    # Headless: a matplotlib without a pinned backend must not look for a display.
    os.environ.setdefault("MPLBACKEND", "agg")
    kernel = Kernel()
    signal.signal(signal.SIGINT, kernel.on_sigint)
    sys.meta_path.insert(0, PyplotHook(kernel))
    kernel.serve()


if __name__ == "__main__":
    main()
