"""mypy plugin: wiring errors that name the task, the input and both types.

Enable it next to pydantic's in the mypy configuration::

    [mypy]
    plugins = pydantic.mypy, legato.mypy

Without it the wiring is still checked (the builder's overloads are precise), but
mypy reports a mismatch against a task's type variables ("Cannot infer value of type
parameter ...") or "No overload variant". With it, each call is checked against the
task's (or workflow's) own parameter types and a mistake reads, for example::

    Argument 1 to task "activate" has incompatible type "Node[User]"; expected "Node[Order]"

The plugin also checks what the overloads cannot express: that ``first_of``'s inputs
fit the first input's type, that a wait's ``default`` fits its model, and that a
switch's field name exists on the output model (its case values then take the field's
type).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from mypy.errorcodes import ARG_TYPE, ATTR_DEFINED, CALL_ARG
from mypy.expandtype import expand_type
from mypy.messages import format_type
from mypy.nodes import (
    ARG_POS,
    ARG_STAR,
    CallExpr,
    Context,
    Expression,
    MemberExpr,
    NameExpr,
    StrExpr,
    Var,
)
from mypy.plugin import CheckerPluginInterface, MethodSigContext, Plugin
from mypy.subtypes import find_member, is_subtype
from mypy.types import (
    AnyType,
    CallableType,
    FunctionLike,
    Instance,
    LiteralType,
    ProperType,
    Type,
    TypeOfAny,
    TypeType,
    get_proper_type,
)

_FLOW = "legato.flow.builder.Flow"
_NODE = "legato.flow.builder.Node"
_TASKS = frozenset(f"legato.flow.tasks.Task{n}" for n in range(6))
_WORKFLOW = "legato.flow.definition.Workflow"
_MODEL = "pydantic.main.BaseModel"

_Hook = Callable[[MethodSigContext], FunctionLike]


class LegatoPlugin(Plugin):
    def get_method_signature_hook(self, fullname: str) -> _Hook | None:
        return _HOOKS.get(fullname)


def plugin(version: str) -> type[Plugin]:
    """The entry point mypy calls."""
    return LegatoPlugin


# -- helpers -----------------------------------------------------------------------------------


def _any() -> AnyType:
    return AnyType(TypeOfAny.special_form)


def _label(expr: Expression) -> str:
    return expr.name if isinstance(expr, NameExpr | MemberExpr) else "?"


def _fmt(api: CheckerPluginInterface, tp: Type) -> str:
    return format_type(tp, api.options)


def _instance(tp: Type, *fullnames: str) -> Instance | None:
    proper = get_proper_type(tp)
    if isinstance(proper, Instance) and proper.type.fullname in fullnames:
        return proper
    return None


def _formal(sig: CallableType, name: str) -> int | None:
    return sig.arg_names.index(name) if name in sig.arg_names else None


def _actual(ctx: MethodSigContext, name: str) -> Expression | None:
    """The argument passed for the default signature's parameter ``name``, if any."""
    index = _formal(ctx.default_signature, name)
    if index is None or len(ctx.args[index]) != 1:
        return None
    return ctx.args[index][0]


def _call_args(ctx: MethodSigContext) -> tuple[list[Expression], dict[str, Expression]] | None:
    """The call's positional and keyword arguments (``None`` if it unpacks ``*``/``**``).

    Overloaded methods get their signature hook once per overload item, with the
    arguments mapped onto that item; the call itself is the same for all of them.
    """
    call = ctx.context
    if not isinstance(call, CallExpr):
        return None
    positional: list[Expression] = []
    named: dict[str, Expression] = {}
    for arg, kind, name in zip(call.args, call.arg_kinds, call.arg_names, strict=True):
        if kind == ARG_POS:
            positional.append(arg)
        elif kind.is_named() and name is not None:
            named[name] = arg
        else:
            return None
    return positional, named


def _bind(sig: CallableType, values: dict[str, Type], loosen: Sequence[str] = ()) -> CallableType:
    """``sig`` with the named type variables fixed and the ``loosen`` parameters made ``Any``.

    A parameter the plugin reported on is loosened so mypy does not report it again.
    """
    env = {v.id: values[v.name] for v in sig.variables if v.name in values}
    bound = expand_type(sig, env)
    types = [
        _any() if name in loosen else tp
        for name, tp in zip(bound.arg_names, bound.arg_types, strict=True)
    ]
    variables = [v for v in sig.variables if v.name not in values]
    return bound.copy_modified(arg_types=types, variables=variables)


def _node_of(sig: CallableType, item: Type) -> Type:
    """``Node[item]``, built from the ``Node[...]`` every ``Flow`` node method returns."""
    node = get_proper_type(sig.ret_type)
    assert isinstance(node, Instance)
    return node.copy_modified(args=[item])


def _fails(api: CheckerPluginInterface, got: Type, want: Type, where: Context, msg: str) -> bool:
    if is_subtype(got, want):
        return False
    api.fail(msg, where, code=ARG_TYPE)
    return True


def _mismatch(api: CheckerPluginInterface, what: str, got: Type, want: Type) -> str:
    return f"{what} has incompatible type {_fmt(api, got)}; expected {_fmt(api, want)}"


def _inputs(api: CheckerPluginInterface, params: Sequence[Type]) -> str:
    if not params:
        return "no inputs"
    listed = ", ".join(_fmt(api, p) for p in params)
    return f"{len(params)} input{'s' if len(params) > 1 else ''} ({listed})"


# -- Flow ---------------------------------------------------------------------------------------


def _run(ctx: MethodSigContext) -> FunctionLike:
    args = _call_args(ctx)
    if args is None or not args[0]:
        return ctx.default_signature
    (task_expr, *node_exprs), _ = args
    api = ctx.api
    task = _instance(api.get_expression_type(task_expr), *_TASKS)
    if task is None:
        return ctx.default_signature
    *params, result = task.args
    name = _label(task_expr)
    if len(node_exprs) != len(params):
        api.fail(
            f'Task "{name}" takes {_inputs(api, params)}; {len(node_exprs)} given',
            ctx.context,
            code=CALL_ARG,
        )
    else:
        for number, (expr, param) in enumerate(zip(node_exprs, params, strict=True), start=1):
            want = _node_of(ctx.default_signature, param)
            got = api.get_expression_type(expr, want)
            what = f'Argument {number} to task "{name}"'
            _fails(api, got, want, expr, _mismatch(api, what, got, want))
    # Every overload item becomes the task's own signature with the inputs already checked.
    sig = ctx.default_signature
    keywords = [i for i, kind in enumerate(sig.arg_kinds) if kind.is_named()]
    return sig.copy_modified(
        arg_types=[task, _any(), *(sig.arg_types[i] for i in keywords)],
        arg_kinds=[ARG_POS, ARG_STAR, *(sig.arg_kinds[i] for i in keywords)],
        arg_names=[None, None, *(sig.arg_names[i] for i in keywords)],
        ret_type=_node_of(sig, result),
        variables=[],
    )


def _map(ctx: MethodSigContext) -> FunctionLike:
    api, sig = ctx.api, ctx.default_signature
    task_expr, items_expr = _actual(ctx, "task"), _actual(ctx, "items")
    if task_expr is None or items_expr is None:
        return sig
    task = _instance(api.get_expression_type(task_expr), *_TASKS)
    if task is None:
        return sig
    name = _label(task_expr)
    *params, result = task.args
    if len(params) != 1:
        api.fail(
            f'Task "{name}" takes {_inputs(api, params)}; map needs a task that takes 1 input',
            task_expr,
            code=ARG_TYPE,
        )
        return _bind(sig, {"R": result}, loosen=("task", "items"))
    (param,) = params
    want = _node_of(sig, api.named_generic_type("builtins.list", [param]))
    got = api.get_expression_type(items_expr, want)
    if not is_subtype(got, _node_of(sig, api.named_generic_type("builtins.list", [_any()]))):
        api.fail(
            f'"map" of "Flow" needs a node whose output is a list; got {_fmt(api, got)}'
            f" (expected {_fmt(api, want)})",
            items_expr,
            code=ARG_TYPE,
        )
    else:
        _fails(
            api,
            got,
            want,
            items_expr,
            _mismatch(api, f'Argument 2 to "map" of "Flow" (task "{name}")', got, want),
        )
    return _bind(sig, {"A1": param, "R": result}, loosen=("items",))


def _child(ctx: MethodSigContext) -> FunctionLike:
    api, sig = ctx.api, ctx.default_signature
    wf_expr, input_expr = _actual(ctx, "workflow"), _actual(ctx, "input")
    if wf_expr is None or input_expr is None:
        return sig
    wf = _instance(api.get_expression_type(wf_expr), _WORKFLOW)
    if wf is None:
        return sig
    takes, gives = wf.args
    want = _node_of(sig, takes)
    got = api.get_expression_type(input_expr, want)
    what = f'Input to child workflow "{_label(wf_expr)}"'
    _fails(api, got, want, input_expr, _mismatch(api, what, got, want))
    return _bind(sig, {"A1": takes, "R": gives}, loosen=("input",))


def _first_of(ctx: MethodSigContext) -> FunctionLike:
    api, sig = ctx.api, ctx.default_signature
    args = _call_args(ctx)
    if args is None or not args[0]:
        return sig
    first, *others = args[0]
    first_node = _instance(api.get_expression_type(first), _NODE)
    if first_node is None:
        return sig
    for number, expr in enumerate(others, start=2):
        got = api.get_expression_type(expr, first_node)
        what = f'Argument {number} to "first_of" of "Flow"'
        msg = _mismatch(api, what, got, first_node) + " (the type of the first input)"
        _fails(api, got, first_node, expr, msg)
    return _bind(sig, {"T": first_node.args[0]}, loosen=("others",))


def _model_instance(tp: ProperType) -> Type | None:
    if isinstance(tp, CallableType) and tp.is_type_obj():
        return tp.ret_type
    if isinstance(tp, TypeType):
        return tp.item
    return None


def _is_missing(tp: Type) -> bool:
    proper = get_proper_type(tp)
    if isinstance(proper, LiteralType):
        proper = proper.fallback
    return isinstance(proper, Instance) and proper.type.fullname == "legato.flow.builder._Missing"


def _wait_for_event(ctx: MethodSigContext) -> FunctionLike:
    api, sig = ctx.api, ctx.default_signature
    model_expr, default_expr = _actual(ctx, "model"), _actual(ctx, "default")
    if model_expr is None or default_expr is None:
        return sig
    model = _model_instance(get_proper_type(api.get_expression_type(model_expr)))
    if model is None:
        return sig
    event_expr = _actual(ctx, "event")
    event = f'"{event_expr.value}"' if isinstance(event_expr, StrExpr) else "its event"
    got = api.get_expression_type(default_expr, model)
    what = f"Default of the wait for {event}"
    if not _is_missing(got):
        _fails(api, got, model, default_expr, _mismatch(api, what, got, model))
    return _bind(sig, {"E": model}, loosen=("default",))


def _switch(ctx: MethodSigContext) -> FunctionLike:
    api, sig = ctx.api, ctx.default_signature
    index = _formal(sig, "field")
    # Only the overload item taking the field's name; the selector item is checked by mypy.
    if index is None or _instance(sig.arg_types[index], "builtins.str") is None:
        return sig
    node_expr, field_expr = _actual(ctx, "node"), _actual(ctx, "field")
    if node_expr is None or not isinstance(field_expr, StrExpr):
        return sig
    node = _instance(api.get_expression_type(node_expr), _NODE)
    model = None if node is None else _model(node.args[0])
    if model is None:
        return sig
    field = field_expr.value
    member = find_member(field, model, model) if field in _fields(model) else None
    if member is None:
        api.fail(
            f'{_fmt(api, model)} has no field "{field}" to switch on '
            f"(its fields: {', '.join(sorted(_fields(model))) or 'none'})",
            field_expr,
            code=ATTR_DEFINED,
        )
        return sig
    switch = get_proper_type(sig.ret_type)
    assert isinstance(switch, Instance)
    return sig.copy_modified(ret_type=switch.copy_modified(args=[member]))


def _model(tp: Type) -> Instance | None:
    proper = get_proper_type(tp)
    return proper if isinstance(proper, Instance) and proper.type.has_base(_MODEL) else None


def _fields(model: Instance) -> list[str]:
    """The model's fields: annotated, non-private attributes of its pydantic classes."""
    names: list[str] = []
    for info in reversed(model.type.mro):
        if not info.has_base(_MODEL) or info.fullname == _MODEL:
            continue
        for name, sym in info.names.items():
            node = sym.node
            is_field = isinstance(node, Var) and not node.is_inferred and not node.is_classvar
            if is_field and not name.startswith("_") and name not in names:
                names.append(name)
    return names


def _on_failure(ctx: MethodSigContext) -> FunctionLike:
    api, sig = ctx.api, ctx.default_signature
    handler_expr = _actual(ctx, "handler")
    if handler_expr is None:
        return sig
    handler = _instance(api.get_expression_type(handler_expr), *_TASKS)
    if handler is None:
        return sig
    *params, _ = handler.args
    expected = _instance(sig.arg_types[0], *_TASKS)
    if expected is None:
        return sig
    info = expected.args[0]
    if len(params) != 1 or not is_subtype(info, params[0]):
        api.fail(
            f'Failure handler "{_label(handler_expr)}" must take 1 input ({_fmt(api, info)}); '
            f"it takes {_inputs(api, params)}",
            handler_expr,
            code=ARG_TYPE,
        )
        return _bind(sig, {}, loosen=("handler",))
    return sig


# -- Client -------------------------------------------------------------------------------------


def _start(ctx: MethodSigContext) -> FunctionLike:
    api, sig = ctx.api, ctx.default_signature
    wf_expr, input_expr = _actual(ctx, "workflow"), _actual(ctx, "input")
    if wf_expr is None or input_expr is None:
        return sig
    index = _formal(sig, "workflow")
    # Only the overload item taking a typed workflow; a workflow's name takes any JSON.
    if index is None or _instance(sig.arg_types[index], _WORKFLOW) is None:
        return sig
    wf = _instance(api.get_expression_type(wf_expr), _WORKFLOW)
    if wf is None:
        return sig
    takes, gives = wf.args
    got = api.get_expression_type(input_expr, takes)
    what = f'Input to workflow "{_label(wf_expr)}"'
    _fails(api, got, takes, input_expr, _mismatch(api, what, got, takes))
    return _bind(sig, {"In": takes, "Out": gives}, loosen=("input",))


_HOOKS: dict[str, _Hook] = {
    f"{_FLOW}.run": _run,
    f"{_FLOW}.map": _map,
    f"{_FLOW}.child": _child,
    f"{_FLOW}.first_of": _first_of,
    f"{_FLOW}.wait_for_event": _wait_for_event,
    f"{_FLOW}.switch": _switch,
    f"{_FLOW}.on_failure": _on_failure,
    "legato.client.Client.start": _start,
}
