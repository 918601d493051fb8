"""What validating against a client's tool schema can cost, decided when it is compiled.

Nothing here does I/O. A schema arrives in a request, so its cost is untrusted input:
`$defs` d0…d39, each `{"anyOf": [{"$ref": d(i+1)}, {"$ref": d(i+1)}]}`, is 1 KB of JSON
that a validator expands into 2^40 paths (issue 18). The walk below counts the expanded
tree, following `$ref` on every path that uses it, with the cost of each acyclic target
remembered so the count itself takes time linear in the schema: it stops at the budget,
so refusing the chain above takes some forty steps, not 2^40.

Recursion is legitimate (a tree of comments, "any JSON value"), and one unrolling is all
the walk counts, because each further level costs only as much as the answer is deep.
What is refused is recursion that fans out: a cycle re-entering its own target twice at
the same place in the instance doubles the work with every level of the answer. A cycle
that never descends into the instance is counted once: jsonschema-rs 0.60.3 reads it as
vacuous (measured: `{"anyOf": [{"$ref": "#"}, {"$ref": "#"}]}` answers in microseconds).

Regular expressions: the validator runs them under fancy-regex with a backtracking limit
(`PATTERN_BACKTRACK_LIMIT`), which bounds nested quantifiers, backreferences and
lookaheads; a lookbehind over an unbounded repetition is re-scanned from every position
(quadratic in the argument's length, and not counted as backtracking), so it is refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

# Keywords whose subschemas apply to the same instance node (no descent into it).
_IN_PLACE_LISTS = ("allOf", "anyOf", "oneOf")
_IN_PLACE_ONE = ("not", "if", "then", "else")
_IN_PLACE_MAPS = ("dependentSchemas", "dependencies")
# Keywords whose subschemas apply to a child of the instance node, with the step taken.
_DESCEND_ONE = ("additionalProperties", "unevaluatedProperties", "propertyNames",
                "additionalItems", "unevaluatedItems", "contains", "items")
# Where in the instance each applies: keywords that can reach the same child share one.
_PLACE = {"additionalProperties": "{}", "unevaluatedProperties": "{}", "propertyNames": "$key",
          "additionalItems": "[]", "unevaluatedItems": "[]", "contains": "[]", "items": "[]"}
_DESCEND_LISTS = ("prefixItems", "items")
_REFS = ("$ref", "$dynamicRef", "$recursiveRef")
_DEFINITIONS = ("$defs", "definitions")


# anyOf/oneOf branches: the same instance node, each tried in turn, and on failure every
# branch's errors collected into the keyword's one error.
_BRANCHES = {"anyOf": ("|anyOf",), "oneOf": ("|oneOf",)}
_BRANCH_STEPS = frozenset(_BRANCHES.values())
_NONE = 1 << 30  # no cycle


class SchemaTooCostly(ValueError):
    """A schema whose validation could cost more than the budget, or without end."""


def _applied(node: dict[str, Any]) -> Iterator[tuple[Any, tuple[str, ...] | None]]:
    """(subschema, the instance step it applies at: None or a _BRANCHES value for the
    same node)."""
    for key in _IN_PLACE_LISTS:
        value = node.get(key)
        if isinstance(value, list):
            for child in value:
                yield child, _BRANCHES.get(key)
    for key in _IN_PLACE_ONE:
        if key in node:
            yield node[key], None
    for key in _IN_PLACE_MAPS:
        value = node.get(key)
        if isinstance(value, dict):
            for child in value.values():
                yield child, None
    for key in _DESCEND_ONE:
        value = node.get(key)
        if isinstance(value, dict):
            yield value, (_PLACE[key],)
    properties = node.get("properties")
    if isinstance(properties, dict):
        for name, child in properties.items():
            yield child, (str(name),)
    patterned = node.get("patternProperties")
    if isinstance(patterned, dict):
        for child in patterned.values():
            yield child, ("{}",)
    for key in _DESCEND_LISTS:
        value = node.get(key)
        if isinstance(value, list):
            for index, child in enumerate(value):
                yield child, (f"[{index}]",)


class _Walk:
    def __init__(self, root: dict[str, Any], budget: int) -> None:
        self.root = root
        self.budget = budget
        self.total = 0
        self.memo: dict[int, tuple[int, int]] = {}  # id(target) -> cost() (acyclic only)
        self.open: dict[int, int] = {}  # id(target) -> its index on the expansion stack
        # Per target being expanded: (path length at entry, the places it was re-entered).
        self.entries: list[tuple[int, set[tuple[str, ...]]]] = []
        self.path: list[tuple[str, ...]] = []
        self.ids: dict[str, Any] = {}
        self.anchors: dict[str, Any] = {}
        self._index(root)

    def _index(self, root: dict[str, Any]) -> None:
        """`$id`s and `$anchor`s, so a `$ref` by either is followed like a pointer."""
        stack: list[Any] = [root]
        seen = 0
        while stack and seen <= self.budget * 4:  # bounded like the rest of the walk
            node = stack.pop()
            seen += 1
            if isinstance(node, dict):
                for key in ("$anchor", "$dynamicAnchor"):
                    if isinstance(node.get(key), str):
                        self.anchors.setdefault(node[key], node)
                if isinstance(node.get("$id"), str) and node is not root:
                    self.ids.setdefault(node["$id"].rstrip("#"), node)
                stack.extend(v for v in node.values() if isinstance(v, dict | list))
            elif isinstance(node, list):
                stack.extend(v for v in node if isinstance(v, dict | list))

    def resolve(self, ref: str) -> Any:
        """The local target of `ref`; one we cannot place counts as the whole schema (the
        validator fetches nothing, so every target it can reach lies inside it)."""
        base, _, fragment = ref.partition("#")
        node: Any = self.ids.get(base, self.root) if base else self.root
        if fragment and not fragment.startswith("/"):
            return self.anchors.get(fragment, self.root)
        for part in fragment.split("/")[1:] if fragment else ():
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return self.root
        return node

    def charge(self, amount: int) -> None:
        self.total += amount
        if self.total > self.budget:
            raise SchemaTooCostly(
                f"validating against it expands to more than {self.budget:,} schema nodes "
                "(through $ref, anyOf, oneOf, allOf, if/then/else); the limit is the "
                "max_schema_nodes setting")

    def cost(self, node: Any) -> tuple[int, int, int]:
        """(expanded nodes under `node`, the expanded size of its widest anyOf or oneOf
        (all branches of one keyword, what building that keyword's error costs), the
        lowest stack index a cycle inside it returned to, or a large number when none
        did: only subtrees without such a cycle are remembered)."""
        self.charge(1)
        if not isinstance(node, dict):
            return 1, 0, _NONE
        own, widest, lowest = 1, 0, _NONE
        for key in _REFS:
            ref = node.get(key)
            if isinstance(ref, str):
                added, inner, low = self.follow(self.resolve(ref))
                own, widest, lowest = own + added, max(widest, inner), min(lowest, low)
        branches: dict[tuple[str, ...], int] = {}
        for child, step in _applied(node):
            if step is not None and step not in _BRANCH_STEPS:
                self.path.append(step)
            try:
                added, inner, low = self.cost(child)
            finally:
                if step is not None and step not in _BRANCH_STEPS:
                    self.path.pop()
            if step is not None and step in _BRANCH_STEPS:
                branches[step] = branches.get(step, 0) + added
            own, widest, lowest = own + added, max(widest, inner), min(lowest, low)
        return own, max(widest, *branches.values(), 0), lowest

    def follow(self, target: Any) -> tuple[int, int, int]:
        key = id(target)
        remembered = self.memo.get(key)
        if remembered is not None:
            self.charge(remembered[0])
            return remembered[0], remembered[1], _NONE
        at = self.open.get(key)
        if at is not None:  # a cycle back to a target being expanded
            return 1, 0, self._reenter(at)
        self.open[key] = len(self.entries)
        self.entries.append((len(self.path), set()))
        try:
            added, widest, lowest = self.cost(target)
        finally:
            self.entries.pop()
            del self.open[key]
        if lowest >= len(self.entries):  # no cycle left this target: its cost is fixed
            self.memo[key] = (added, widest)
            lowest = _NONE
        return added, widest, lowest

    def _reenter(self, at: int) -> int:
        entered, seen = self.entries[at]
        where = tuple(step for steps in self.path[entered:] for step in steps)
        if not where:  # jsonschema-rs reads such a cycle as vacuous, at no cost
            self.charge(1)
            return at
        if where in seen:
            raise SchemaTooCostly(
                "a recursive $ref re-enters itself twice at the same place "
                f"({'/'.join(where)}), so validating doubles with every level of the answer")
        seen.add(where)
        self.charge(1)
        return at


def schema_cost(schema: dict[str, Any], budget: int) -> tuple[int, int]:
    """(the expanded size of `schema`, that of its widest anyOf or oneOf keyword):
    raises SchemaTooCostly once the size passes `budget`, or on a cycle that fans out.
    Time: at most about `budget` steps."""
    total, widest, _ = _Walk(schema, budget).cost(schema)
    return total, widest


def schema_patterns(schema: dict[str, Any], limit: int) -> Iterator[str]:
    """Every `pattern` and `patternProperties` key of the schema's subschemas, `$defs`
    included (the validator compiles them all); at most `limit` nodes are looked at."""
    stack: list[Any] = [schema]
    seen = 0
    while stack and seen < limit:
        node = stack.pop()
        seen += 1
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        if isinstance(node.get("pattern"), str):
            yield node["pattern"]
        properties = node.get("patternProperties")
        if isinstance(properties, dict):
            yield from (key for key in properties if isinstance(key, str))
        for key in _DEFINITIONS:
            if isinstance(node.get(key), dict):
                stack.extend(node[key].values())
        stack.extend(child for child, _ in _applied(node))


def unbounded_lookbehind(pattern: str) -> bool:
    """Whether `pattern` holds a lookbehind (`(?<=…)`, `(?<!…)`) whose body repeats
    without bound (`*`, `+`, `{n,}`): fancy-regex re-scans such a body from every
    position, so its cost grows with the square of the text's length."""
    i, n = 0, len(pattern)
    in_class = False
    opened: list[bool] = []  # per open group: whether it is (inside) a lookbehind
    while i < n:
        char = pattern[i]
        if char == "\\":
            i += 2
            continue
        if in_class:
            in_class = char != "]"
            i += 1
            continue
        inside = bool(opened) and opened[-1]
        if char == "[":
            in_class = True
            if pattern.startswith("]", i + 1) or pattern.startswith("^]", i + 1):
                i += 1 + (pattern[i + 1] == "^")  # a leading ] is a literal
        elif char == "(":
            behind = pattern.startswith(("(?<=", "(?<!"), i)
            opened.append(inside or behind)
        elif char == ")":
            if opened:
                opened.pop()
        elif inside and char in "*+":
            return True
        elif inside and char == "{":
            close = pattern.find("}", i)
            if close > 0 and pattern[i + 1:close].replace(" ", "").endswith(","):
                return True
        i += 1
    return False
