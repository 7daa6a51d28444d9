"""A small, safe arithmetic-expression evaluator shared by the ISA tables, kernel launch
parameters and report figures.

Expressions are Python syntax restricted to: numbers, strings (as function arguments), names
(dotted names such as ``sm.tensor_bf16_flops_per_cycle`` are looked up whole), ``+ - * / // % **``,
unary minus, comparisons, ``a if c else b``, parentheses and calls of the functions the caller
passes in (``min``, ``max``, ``abs``, ``ceil`` and ``floor`` are always available). Nothing else
(attribute access on objects, subscripts, lambdas, imports) is accepted, so a config file cannot
run code.
"""
import ast
import math
import operator

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
           ast.Pow: operator.pow}
_CMPOPS = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
           ast.Eq: operator.eq, ast.NotEq: operator.ne}
BUILTIN_FUNCTIONS = {"min": min, "max": max, "abs": abs, "ceil": math.ceil, "floor": math.floor}


class ExprError(Exception):
    """The expression cannot be parsed or evaluated; the message says why, without location."""


def dotted_name(node):
    """'a.b.c' for a Name/Attribute chain, or None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted_name(node.value)
        return None if base is None else base + "." + node.attr
    return None


def names_in(text):
    """The dotted names an expression refers to (not counting called function names)."""
    try:
        tree = ast.parse(str(text), mode="eval")
    except SyntaxError as e:
        raise ExprError(f"syntax error: {e.msg}") from None
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Name, ast.Attribute)) and id(node) not in called:
            name = dotted_name(node)
            if name and not any(o.startswith(name + ".") for o in out) and name not in out:
                out = [o for o in out if not name.startswith(o + ".")]
                out.append(name)
    return out


#: the largest integer an expression may build, in bits: every value an expression gives (costs,
#: launch parameters, report figures) ends in a 64-bit register or a float; far larger integers
#: (`10**10**10`) would take minutes or all memory to compute, so they are refused instead
MAX_INT_BITS = 1024


def _binop(op, a, b):
    """One arithmetic operation, refused when its operands are not numbers or its integer result
    would exceed MAX_INT_BITS (computed before the operation, so it costs nothing)."""
    for v in (a, b):
        if isinstance(v, str):
            raise ExprError(f"a string ({v!r}) can only be a function argument, not an operand "
                            f"of '{_OP_TEXT[type(op)]}'")
    if isinstance(a, int) and isinstance(b, int):
        bits = None
        if isinstance(op, ast.Pow) and b > 0 and abs(a) > 1:
            bits = (abs(a).bit_length() - 1) * b
        elif isinstance(op, ast.Mult):
            bits = abs(a).bit_length() + abs(b).bit_length() - 1
        if bits is not None and bits > MAX_INT_BITS:
            raise ExprError(f"the result of {a if a.bit_length() < 64 else '(a large integer)'} "
                            f"{_OP_TEXT[type(op)]} {b if b.bit_length() < 64 else '(a large integer)'}"
                            f" is too large (more than {MAX_INT_BITS} bits)")
    return _BINOPS[type(op)](a, b)


_OP_TEXT = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
            ast.Mod: "%", ast.Pow: "**"}


def evaluate(text, env, functions=None):
    """Evaluate `text` with names from `env` (dict: dotted name -> value) and `functions`."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return text
    funcs = dict(BUILTIN_FUNCTIONS)
    if functions:
        funcs.update(functions)

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str)) \
                and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _binop(node.op, ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.Compare) and all(type(o) in _CMPOPS for o in node.ops):
            left = ev(node.left)
            for op, right_node in zip(node.ops, node.comparators):
                right = ev(right_node)
                if not _CMPOPS[type(op)](left, right):
                    return 0
                left = right
            return 1
        if isinstance(node, ast.IfExp):
            return ev(node.body) if ev(node.test) else ev(node.orelse)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
            if node.func.id not in funcs:
                raise ExprError(f"unknown function '{node.func.id}' (known: {', '.join(sorted(funcs))})")
            return funcs[node.func.id](*[ev(a) for a in node.args])
        name = dotted_name(node) if isinstance(node, (ast.Name, ast.Attribute)) else None
        if name is not None:
            if name not in env:
                import difflib
                close = difflib.get_close_matches(name, list(env), n=1)
                hint = f"; did you mean '{close[0]}'?" if close else ""
                raise ExprError(f"unknown name '{name}'{hint}")
            return env[name]
        raise ExprError(f"unsupported syntax '{ast.unparse(node)}'")

    try:
        tree = ast.parse(str(text).strip(), mode="eval")
    except SyntaxError as e:
        raise ExprError(f"syntax error: {e.msg}") from None
    try:
        return ev(tree)
    except ZeroDivisionError:
        raise ExprError("division by zero") from None
    except OverflowError:
        raise ExprError("numeric overflow") from None
    except (KeyError, IndexError, ValueError, TypeError) as e:
        raise ExprError(str(e)) from None
