"""Report figures: derived numbers a config asks for (``workload.report``), dumped as
``system.ubench.<name>`` and printed on stdout.

An expression may use numbers, + - * / // % **, parentheses, min/max/abs, and:
  stat('name')                 value of a stat of this run
  sum_stats('pattern')         sum of the stats matching a shell-style pattern
  max_stats / min_stats('pattern')
  word(gpu, 'buffer', index)   64-bit integer element `index` of a buffer on a GPU (e.g. a
                               timestamp a kernel stored with `st [...], %tick`)
and the names of the system parameters (``gpu.num_sms``, ``nvlink.bandwidth``, ...).
"""
import ast
import operator

from ..config import flat_params

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
           ast.Pow: operator.pow}


class ReportError(Exception):
    pass


def _dotted(node):
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return _dotted(node.value) + "." + node.attr
    raise ReportError("unsupported expression element")


def evaluate_expression(text, sim, names):
    stats = sim.stats

    def stat(name):
        if name not in stats:
            raise ReportError(f"no stat named '{name}'")
        return stats[name]

    def matching(pattern):
        found = stats.match(pattern)
        if not found:
            raise ReportError(f"no stat matches '{pattern}'")
        return [s.value for s in found]

    funcs = {
        "stat": stat,
        "sum_stats": lambda pat: sum(matching(pat)),
        "max_stats": lambda pat: max(matching(pat)),
        "min_stats": lambda pat: min(matching(pat)),
        "word": lambda gpu, buf, index: int(sim.read_buffer(int(gpu), buf, "i64")[int(index)]),
        "min": min, "max": max, "abs": abs,
    }

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _BINOPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in funcs:
            return funcs[node.func.id](*[ev(a) for a in node.args])
        if isinstance(node, (ast.Name, ast.Attribute)):
            key = _dotted(node)
            if key not in names:
                raise ReportError(f"unknown name '{key}'")
            return names[key]
        raise ReportError(f"unsupported syntax '{ast.unparse(node)}'")

    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as e:
        raise ReportError(f"syntax error: {e.msg}") from None
    try:
        return ev(tree)
    except ZeroDivisionError:
        raise ReportError("division by zero") from None
    except (KeyError, IndexError, ValueError, TypeError) as e:
        raise ReportError(str(e)) from None


def evaluate_report(sim):
    """Add every workload.report figure to sim.stats as system.ubench.<name>."""
    names = flat_params(sim.cfg)
    for rep in sim.cfg.workload.report:
        try:
            value = evaluate_expression(rep.expr, sim, names)
        except ReportError as e:
            from ..simulation import SimulationError
            raise SimulationError(f"workload.report.{rep.name}.expr: cannot evaluate '{rep.expr}': {e}")
        sim.stats.add(f"system.ubench.{rep.name}", float(value), rep.unit, rep.desc)
