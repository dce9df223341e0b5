#!/usr/bin/env python3
"""Generates the op table's C++ from core/ops.yaml.

    gen_ops.py <core/ops.yaml> <output dir>

Writes, under <output dir>:
  core/generated/op_ids.h      OpId, kNumOps
  core/generated/op_info.h     kOpInfo (kind, dtypes, rule, arity, gradient, save rules)
  core/generated/attrs.h       the attribute enums, struct Attrs and its functions
  core/generated/op_table.cpp  Attrs equality/bytes/printing, the NVRTC functor text
  core/generated/ops_api.h/.cpp         the public ops of rows with `api: true`
  kernels/generated/pointwise_functors.h  functors of `fwd`/`grad` expressions (nvcc, NVRTC)
  kernels/generated/make_functor.h        make_functor and the elementwise op list
  nn/generated/functional.h, activation.h/.cpp  nn functional forms and modules (`nn`)

Strict on purpose: an unknown key, a pointwise row without a functor, a differentiable row
without a backward, or an expression naming something undeclared stops the build.
"""
import os
import re
import sys

import yaml

KINDS = {"Nullary", "Unary", "Binary", "Ternary", "Reduce", "Matmul", "Softmax", "Loss", "Index",
         "Cat", "View", "Factory", "Random", "Transfer", "MultiTensor", "Conv", "Pool",
         "Attention", "Collective", "MultiReduce", "Norm"}
POINTWISE = {"Nullary", "Unary", "Binary", "Ternary"}
RULES = {"Same", "IntToFloat", "ToBool", "ToInt64", "Index", "Cast", "Select"}
# Rules that fix an elementwise op's inputs as well as its output, and so how a kernel applies
# it: Cast converts one input of any dtype to attrs.dtype; Select reads a bool condition first.
RULE_KINDS = {"Cast": "Unary", "Select": "Ternary"}
DTYPES = {"float": "kFloatTypes", "numeric": "kNumericTypes", "all": "kAllTypes",
          "index": "kIndexTypes"}
ROW_KEYS = {"kind", "arity", "dtypes", "rule", "attrs", "reads", "functor", "fwd", "grad",
            "backward", "diff", "save", "api", "nn", "autocast", "doc"}
# Under autocast (core/autocast.h), PyTorch's policy: `lower` casts floating inputs to the low
# dtype, `fp32` casts 16-bit floating inputs to float32, `promote` widens mixed floating inputs
# to the widest; rows without the key run on what they are given.
AUTOCAST = {"none": "None", "lower": "Lower", "fp32": "Fp32", "promote": "Promote"}
NN_KEYS = {"functional", "module"}
TOP_KEYS = {"enums", "attributes", "ops"}

# Attribute types: C++ field type, the API parameter type, and the default without one.
TYPES = {
    "i64": ("int64_t", "int64_t", "0"),
    "u64": ("uint64_t", "uint64_t", "0"),
    "f64": ("double", "double", "0"),
    "bool": ("bool", "bool", "false"),
    "Scalar": ("Scalar", "const Scalar&", None),
    "DType": ("DType", "DType", "kFloat32"),
    "Dims": ("Dims", "const Dims&", None),
    "Shape": ("Shape", "const Shape&", None),
    "Device": ("Device", "Device", None),
    "ptr": ("const uint64_t*", None, "nullptr"),
}
# Types a functor can take (converted to double or bool on the way in).
FUNCTOR_TYPES = {"f64", "Scalar", "bool", "i64"}

# Names an expression may call, and what they become in the functor.
FUNCTIONS = {f: f"EMBER_MATH({f})" for f in
             ("exp", "log", "log1p", "expm1", "tanh", "erf", "sqrt", "pow", "fabs")}
FUNCTIONS["is_nan"] = "is_nan"


class GenError(Exception):
    pass


def fail(msg):
    raise GenError(msg)


def parse_attr(name, spec):
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
        fail(f"attribute '{name}': not a lower_case name")
    spec = str(spec).strip()
    m = re.fullmatch(r"(\w+)(?:\s*=\s*(.+))?", spec)
    if not m:
        fail(f"attribute '{name}': want 'type' or 'type = default', got '{spec}'")
    return m.group(1), m.group(2)


class Table:
    def __init__(self, data):
        if not isinstance(data, dict):
            fail("the top level must be a mapping")
        for k in data:
            if k not in TOP_KEYS:
                fail(f"unknown top-level key '{k}'")
        self.enums = {}
        for name, values in (data.get("enums") or {}).items():
            if not isinstance(values, list) or not values:
                fail(f"enum '{name}': want a list of values")
            self.enums[name] = [str(v) for v in values]
        self.attrs = {}  # name -> (type, default C++ text or None)
        for name, spec in (data.get("attributes") or {}).items():
            t, default = parse_attr(name, spec)
            if t not in TYPES and t not in self.enums:
                fail(f"attribute '{name}': unknown type '{t}'")
            if t in self.enums and default is not None:
                if default not in self.enums[t]:
                    fail(f"attribute '{name}': {default} is not a value of {t}")
                default = f"{t}::{default}"
            if t == "bool" and default is not None and default not in ("true", "false"):
                fail(f"attribute '{name}': a bool default is true or false")
            self.attrs[name] = (t, default)
        self.rows = []
        for name, row in (data.get("ops") or {}).items():
            self.rows.extend(self.parse_row(name, row))
        names = [r["name"] for r in self.rows]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            fail(f"ops defined twice: {sorted(dup)}")

    def parse_row(self, name, row):
        where = f"op '{name}'"
        if not isinstance(row, dict):
            fail(f"{where}: want a mapping")
        for k in row:
            if k not in ROW_KEYS:
                fail(f"{where}: unknown key '{k}'")
        for k in ("kind", "arity", "dtypes", "rule"):
            if k not in row:
                fail(f"{where}: missing '{k}'")
        kind = row["kind"]
        if kind not in KINDS:
            fail(f"{where}: unknown kind '{kind}'")
        if row["rule"] not in RULES:
            fail(f"{where}: unknown rule '{row['rule']}'")
        if row["rule"] in RULE_KINDS and kind != RULE_KINDS[row["rule"]]:
            fail(f"{where}: rule {row['rule']} is for {RULE_KINDS[row['rule']]} ops")
        if row["rule"] == "Cast" and "dtype" not in (row.get("reads") or []):
            fail(f"{where}: rule Cast reads the 'dtype' attribute")
        if row["dtypes"] not in DTYPES:
            fail(f"{where}: unknown dtypes '{row['dtypes']}' (one of {sorted(DTYPES)})")
        arity = row["arity"]
        want_arity = {"Nullary": 0, "Unary": 1, "Binary": 2, "Ternary": 3}.get(kind)
        if want_arity is not None and arity != want_arity:
            fail(f"{where}: a {kind} op has arity {want_arity}")
        attrs = row.get("attrs") or []
        reads = row.get("reads") or []
        for a in list(attrs) + list(reads):
            if a not in self.attrs:
                fail(f"{where}: attribute '{a}' is not declared under 'attributes'")
        r = {"name": name, "kind": kind, "arity": arity, "dtypes": row["dtypes"],
             "rule": row["rule"], "attrs": list(attrs), "reads": list(reads), "functor": row.get("functor"),
             "fwd": row.get("fwd"), "grad": None, "grad_op": None, "grad_reads": None,
             "api": bool(row.get("api", False)), "nn": row.get("nn") or {},
             "autocast": row.get("autocast", "none"), "doc": row.get("doc")}
        if r["autocast"] not in AUTOCAST:
            fail(f"{where}: 'autocast' is one of {', '.join(sorted(AUTOCAST))}")
        for k in r["nn"]:
            if k not in NN_KEYS:
                fail(f"{where}: unknown key 'nn.{k}'")
        if kind in POINTWISE:
            if (r["functor"] is None) == (r["fwd"] is None):
                fail(f"{where}: a pointwise op needs exactly one of 'functor' and 'fwd'")
            if r["functor"] is not None and r["functor"] != name:
                fail(f"{where}: the functor of op '{name}' is pw::{name}")
        elif r["functor"] or r["fwd"]:
            fail(f"{where}: only pointwise ops have a functor")
        if r["fwd"] is not None and (kind != "Unary" or r["rule"] not in ("Same", "IntToFloat")):
            fail(f"{where}: 'fwd' expressions are for Unary ops of rule Same or IntToFloat")
        for a in r["attrs"]:
            if r["fwd"] is not None or r["functor"] is not None:
                if self.attrs[a][0] not in FUNCTOR_TYPES:
                    fail(f"{where}: a functor cannot take attribute '{a}' "
                         f"of type {self.attrs[a][0]}")
        if r["api"] and r["fwd"] is None:
            fail(f"{where}: 'api: true' generates the API of expression rows only")
        if r["nn"] and not r["api"]:
            fail(f"{where}: 'nn' forms call the generated API: set 'api: true'")
        # The generated declarations carry it into the API reference (docs/Doxyfile.in).
        if r["api"] and not (isinstance(r["doc"], str) and r["doc"].strip()):
            fail(f"{where}: 'api: true' needs a 'doc' sentence for the API reference")
        if r["doc"] is not None and not r["api"]:
            fail(f"{where}: 'doc' documents a generated API: set 'api: true'")

        diff = row.get("diff", True)
        if diff not in (True, False):
            fail(f"{where}: 'diff' is true or false")
        has_formula = "backward" in row
        if has_formula and row["backward"] != "formula":
            fail(f"{where}: 'backward' is 'formula' (a case in autograd/formulas.cpp)")
        has_grad = "grad" in row
        if not diff and (has_formula or has_grad or "save" in row):
            fail(f"{where}: a row with 'diff: false' has no backward, grad or save")
        if diff and has_formula == has_grad:
            fail(f"{where}: a differentiable op needs exactly one of 'backward' and 'grad'")
        r["diff"] = diff
        r["save"] = self.parse_save(where, row.get("save") or [], arity)
        out = [r]
        if has_grad:
            if r["fwd"] is None:
                fail(f"{where}: 'grad' expressions go with 'fwd' expressions")
            if "save" in row:
                fail(f"{where}: a 'grad' row saves what its expression reads; drop 'save'")
            grad = parse_expr(where + " grad", row["grad"], {"x", "y", "g"}, r["attrs"])
            reads = [v for v in ("x", "y") if v in grad["names"]]
            if len(reads) > 1:
                fail(f"{where}: a grad expression reads x or y, not both")
            r["grad"] = grad
            r["grad_reads"] = reads[0] if reads else "x"
            r["grad_op"] = name + "_backward"
            r["save"] = {"in0": "Always"} if r["grad_reads"] == "x" else {"out": "Always"}
            out.append({"name": name + "_backward", "kind": "Binary", "arity": 2,
                        "dtypes": r["dtypes"], "rule": "Same", "attrs": r["attrs"],
                        "reads": [], "functor": None, "fwd": None, "grad_of": r, "grad": None,
                        "grad_op": None, "grad_reads": None, "api": False, "nn": {},
                        "diff": False, "save": {}, "autocast": "none"})
        if r["fwd"] is not None:
            r["fwd_expr"] = parse_expr(where + " fwd", r["fwd"], {"x"}, r["attrs"])
        return out

    def parse_save(self, where, items, arity):
        save = {}
        for item in items:
            m = re.fullmatch(r"(in[0-2]|out)(?:\s+if\s+need([0-2]))?", str(item).strip())
            if not m:
                fail(f"{where}: save entry '{item}': want in0/in1/in2/out [if needN]")
            slot, need = m.group(1), m.group(2)
            if slot.startswith("in") and arity >= 0 and int(slot[2]) >= arity:
                fail(f"{where}: save entry '{item}': the op has {arity} inputs")
            if slot in save:
                fail(f"{where}: '{slot}' saved twice")
            save[slot] = "Always" if need is None else f"IfNeed{need}"
        return save


TOKEN = re.compile(r"\s*(?:(\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|([A-Za-z_]\w*)|(\|\||&&|[<>=!]=|"
                   r"[-+*/()?:<>,!]))")


def parse_expr(where, text, inputs, attrs):
    """'result; a = e1; b = e2' -> C++ statements. Number literals become T(...), attributes of
    floating type T(name); every other name must be an input, a local or a known function."""
    parts = [p.strip() for p in str(text).split(";")]
    result, defs = parts[0], parts[1:]
    locals_ = []
    names = set()

    def translate(src, known_locals):
        out, pos = [], 0
        while pos < len(src):
            m = TOKEN.match(src, pos)
            if not m or m.end() == pos:
                if src[pos:].strip() == "":
                    break
                fail(f"{where}: cannot read '{src[pos:]}'")
            pos = m.end()
            num, ident, op = m.group(1), m.group(2), m.group(3)
            if num is not None:
                out.append(f"T({m.group(0).strip()})")
            elif ident is not None:
                if ident in inputs or ident in known_locals:
                    names.add(ident)
                    out.append(ident)
                elif ident in attrs:
                    out.append(f"T({ident})")
                elif ident in FUNCTIONS:
                    out.append(FUNCTIONS[ident])
                else:
                    fail(f"{where}: '{ident}' is not an input ({', '.join(sorted(inputs))}), "
                         f"a local, an attribute of the row ({', '.join(attrs) or 'none'}) or "
                         f"a known function ({', '.join(sorted(FUNCTIONS))})")
            else:
                out.append(op)
        s = " ".join(out)
        return re.sub(r"\( ", "(", re.sub(r" \)", ")", re.sub(r"(\w|\)) \(", r"\1(", s)))

    stmts = []
    known = []
    for d in defs:
        m = re.fullmatch(r"([a-z_]\w*)\s*=\s*(.+)", d)
        if not m:
            fail(f"{where}: want 'name = expression' after ';', got '{d}'")
        known.append(m.group(1))
    for d in defs:
        m = re.fullmatch(r"([a-z_]\w*)\s*=\s*(.+)", d)
        name = m.group(1)
        if name in inputs or name in attrs or name in FUNCTIONS:
            fail(f"{where}: local '{name}' shadows another name")
        # A local may use the ones defined before it.
        stmts.append(f"const T {name} = {translate(m.group(2), locals_)};")
        locals_.append(name)
    ret = translate(result, locals_)
    unused = set(known) - names
    if unused:
        fail(f"{where}: locals never used: {sorted(unused)}")
    return {"stmts": stmts, "ret": ret, "names": names}


# ---- writers ---------------------------------------------------------------------------------

HEADER = "// Generated by tools/gen_ops.py from core/ops.yaml: do not edit.\n"
# The op table's internals: tools/public_headers.py leaves them out of the API reference.
INTERNAL = "// ember-doc: internal\n"


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    old = None
    if os.path.exists(path):
        with open(path) as f:
            old = f.read()
    if old != text:  # keep the timestamp when nothing changed: no needless rebuilds
        with open(path, "w") as f:
            f.write(text)


def gen_op_ids(t):
    ids = "".join(f"  {r['name']},\n" for r in t.rows)
    return (HEADER + INTERNAL + "#pragma once\n// Included by core/op.h.\n\nnamespace ember {\n\n"
            f"enum class OpId : uint16_t {{\n{ids}}};\n\n"
            f"inline constexpr int kNumOps = {len(t.rows)};\n\n}}  // namespace ember\n")


def gen_op_info(t):
    lines = []
    for r in t.rows:
        save = r["save"]
        s = ", ".join(f"SaveWhen::{save.get(k, 'Never')}" for k in ("in0", "in1", "in2", "out"))
        grad_op = f"OpId::{r['grad_op']}" if r["grad_op"] else f"OpId::{r['name']}"
        lines.append(
            f"    {{\"{r['name']}\", OpKind::{r['kind']}, {DTYPES[r['dtypes']]}, "
            f"OutRule::{r['rule']}, {r['arity']}, {str(r['diff']).lower()}, {{{s}}}, "
            f"{str(r['grad_op'] is not None).lower()}, {grad_op}, "
            f"AutocastPolicy::{AUTOCAST[r['autocast']]}}},\n")
    return (HEADER + INTERNAL + "#pragma once\n// Included by core/op.h after OpInfo.\n\n"
            "namespace ember {\n\ninline constexpr OpInfo kOpInfo[] = {\n" + "".join(lines) +
            "};\n\n}  // namespace ember\n")


def gen_attrs_h(t):
    enums = "".join(f"enum class {n} : uint8_t {{ {', '.join(v)} }};\n" for n, v in t.enums.items())
    fields = []
    for name, (ty, default) in t.attrs.items():
        cty = TYPES[ty][0] if ty in TYPES else ty
        d = default if default is not None else (TYPES[ty][2] if ty in TYPES else None)
        fields.append(f"  {cty} {name}" + (f" = {d};\n" if d is not None else ";\n"))
    return (HEADER + INTERNAL + "#pragma once\n// Included by core/op.h: the attributes of one op call, "
            "one typed field per attribute\n// of core/ops.yaml. An op reads the fields its row "
            "lists and ignores the rest.\n#include <iosfwd>\n#include <string>\n\n"
            "namespace ember {\n\n" + enums + "\nstruct Attrs {\n" + "".join(fields) + "};\n\n"
            "// Every field but the device addresses (ptr), whatever the op reads: a field an op\n"
            "// ignores costs at most a missed merge, a forgotten one would merge different\n"
            "// computations. Floats compare bitwise (NaN matches itself, -0.0 is not 0.0).\n"
            "bool attrs_equal(const Attrs& a, const Attrs& b);\n"
            "// The bytes of the same fields, for keys that must change when an attribute does.\n"
            "void append_attr_bytes(std::string& out, const Attrs& a);\n"
            "// \" name=value\" for each attribute `op` reads.\n"
            "void print_attrs(std::ostream& os, OpId op, const Attrs& a);\n"
            "// The functor of pointwise `op` as NVRTC source, \"pw::name{args}\" with the\n"
            "// attributes make_functor passes (floats as exact bit patterns); empty for ops\n"
            "// without one.\n"
            "std::string pointwise_functor_source(OpId op, const Attrs& a);\n\n"
            "}  // namespace ember\n")


def functor_arg(t, a):
    ty = t.attrs[a][0]
    return f"a.{a}.to_double()" if ty == "Scalar" else f"a.{a}"


def gen_op_table_cpp(t):
    eq, by, pr = [], [], []
    for name, (ty, _) in t.attrs.items():
        if ty == "ptr":
            continue
        if ty == "f64":
            eq.append(f"double_equal(a.{name}, b.{name})")
        elif ty == "Scalar":
            eq.append(f"scalar_equal(a.{name}, b.{name})")
        else:
            eq.append(f"a.{name} == b.{name}")
        if ty in ("Dims", "Shape"):
            by.append(f"  dims(a.{name});\n")
        elif ty == "Scalar":
            by.append(f"  scalar(a.{name});\n")
        elif ty == "Device":
            by.append(f"  pod(a.{name}.type);\n  pod(a.{name}.index);\n")
        else:
            by.append(f"  pod(a.{name});\n")
    prints, sources = [], []
    for r in t.rows:
        if r["attrs"] or r["reads"]:
            body = "".join(f"      os << \" {a}=\"; print(os, a.{a});\n"
                           for a in r["attrs"] + r["reads"])
            prints.append(f"    case OpId::{r['name']}:\n{body}      break;\n")
        if r["kind"] in ("Unary", "Binary", "Ternary"):
            args = " + \", \" + ".join(
                (f"literal(a.{a}.to_double())" if t.attrs[a][0] == "Scalar" else f"literal(a.{a})")
                for a in r["attrs"])
            src = f"\"pw::{r['name']}{{\" + {args} + \"}}\"" if args else f"\"pw::{r['name']}{{}}\""
            sources.append(f"    case OpId::{r['name']}:\n      return {src};\n")
    enum_print = "".join(
        f"void print(std::ostream& os, {n} v) {{\n  static const char* const k[] = {{"
        + ", ".join(f"\"{v}\"" for v in vals) + "};\n  os << k[static_cast<int>(v)];\n}\n"
        for n, vals in t.enums.items())
    return (HEADER + """#include <bit>
#include <cstring>
#include <ostream>
#include <sstream>

#include "core/op.h"

namespace ember {
namespace {

bool double_equal(double a, double b) {
  return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b);
}
bool scalar_equal(const Scalar& a, const Scalar& b) {
  if (a.kind() != b.kind()) return false;
  if (a.is_floating()) return double_equal(a.to_double(), b.to_double());
  return a.to_int() == b.to_int();
}

void print(std::ostream& os, double v) { os << v; }
void print(std::ostream& os, int64_t v) { os << v; }
void print(std::ostream& os, uint64_t v) { os << v; }
void print(std::ostream& os, bool v) { os << (v ? "true" : "false"); }
void print(std::ostream& os, const Scalar& v) {
  if (v.is_floating())
    os << v.to_double();
  else
    os << v.to_int();
}
void print(std::ostream& os, DType v) { os << dtype_name(v); }
void print(std::ostream& os, const Dims& v) { os << v; }  // Shape too: the same type
void print(std::ostream& os, Device v) { os << v.str(); }
void print(std::ostream& os, const uint64_t* v) { os << static_cast<const void*>(v); }
""" + enum_print + """
// Exact: the JIT's source must build the functor make_functor builds.
std::string literal(double d) {
  std::ostringstream os;
  os << "fp::f64_bits(0x" << std::hex << std::bit_cast<uint64_t>(d) << "ull)";
  return os.str();
}
[[maybe_unused]] std::string literal(bool b) { return b ? "true" : "false"; }
[[maybe_unused]] std::string literal(int64_t v) { return std::to_string(v) + "ll"; }

}  // namespace

bool attrs_equal(const Attrs& a, const Attrs& b) {
  return """ + " &&\n         ".join(eq) + """;
}

void append_attr_bytes(std::string& out, const Attrs& a) {
  auto pod = [&](const auto& v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof(v));
  };
  auto dims = [&](const auto& d) {
    pod(d.size());
    for (int64_t x : d) pod(x);
  };
  auto scalar = [&](const Scalar& v) {
    pod(v.is_floating());
    if (v.is_floating())
      pod(v.to_double());
    else
      pod(v.to_int());
  };
""" + "".join(by) + """}

void print_attrs(std::ostream& os, OpId op, const Attrs& a) {
  switch (op) {
""" + "".join(prints) + """    default:
      break;
  }
}

std::string pointwise_functor_source(OpId op, const Attrs& a) {
  switch (op) {
""" + "".join(sources) + """    default:
      return {};
  }
}

}  // namespace ember
""")


def functor_struct(t, name, params, attrs, expr, doc):
    fields = "".join(f"  {'bool' if t.attrs[a][0] == 'bool' else 'double'} {a} = "
                     f"{t.attrs[a][1] if t.attrs[a][1] is not None else '0'};\n" for a in attrs)
    args = ", ".join(f"T {p}" for p in params)
    body = "".join(f"    {s}\n" for s in expr["stmts"])
    return (f"// {doc}\nstruct {name} {{\n{fields}  template <class T>\n"
            f"  EMBER_HD T operator()({args}) const {{\n{body}    return {expr['ret']};\n"
            f"  }}\n}};\n")


def gen_functors(t):
    out = []
    for r in t.rows:
        if r.get("fwd_expr"):
            out.append(functor_struct(t, r["name"], ["x"], r["attrs"], r["fwd_expr"], r["fwd"]))
        if r.get("grad_of"):
            p = r["grad_of"]
            out.append(functor_struct(t, r["name"], ["g", p["grad_reads"]], r["attrs"], p["grad"],
                                      "d " + p["name"] + " times g: " + p_grad_text(p)))
    return (HEADER + "// Included by kernels/pointwise_functors.h (and embedded with it for NVRTC)."
            "\n#pragma once\n\nnamespace ember::pw {\n\n" + "\n".join(out) +
            "\n}  // namespace ember::pw\n")


def p_grad_text(p):
    return " ".join(str(p["grad_src"]).split()) if p.get("grad_src") else "(see core/ops.yaml)"


def gen_make_functor(t):
    specs, ew = [], []
    for r in t.rows:
        if r["kind"] in ("Unary", "Binary", "Ternary"):
            ew.append(r["name"])
        if r["kind"] in POINTWISE and r["attrs"]:
            args = ", ".join(functor_arg(t, a) for a in r["attrs"])
            specs.append(f"template <>\ninline pw::{r['name']} make_functor<pw::{r['name']}>("
                         f"const Attrs& a) {{\n  return pw::{r['name']}{{{args}}};\n}}\n")
    lst = " \\\n  ".join(f"X({n})" for n in ew)
    return (HEADER + "// Included by kernels/pointwise_ops.h.\n#pragma once\n\n"
            "namespace ember::kernels {\n\n" + "".join(specs) +
            "\n}  // namespace ember::kernels\n\n"
            "// Every Unary, Binary and Ternary op, each a pw:: functor.\n"
            f"#define EMBER_ELEMENTWISE_OPS(X) \\\n  {lst}\n")


def doc_lines(text, prefix=""):
    """A row's doc as `///` lines of at most 100 columns, for the API reference."""
    words, lines, line = (prefix + " ".join(text.split())).split(" "), [], "///"
    for w in words:
        if len(line) + 1 + len(w) > 100 and line != "///":
            lines.append(line)
            line = "///"
        line += " " + w
    lines.append(line)
    return "".join(l + "\n" for l in lines)


def api_params(t, r, with_defaults):
    ps = []
    for a in r["attrs"]:
        ty, default = t.attrs[a]
        p = f"{TYPES[ty][1]} {a}"
        if with_defaults and default is not None:
            p += f" = {default}"
        ps.append(p)
    return "".join(", " + p for p in ps)


def gen_api(t):
    decls, defs = [], []
    for r in t.rows:
        if not r["api"]:
            continue
        n = r["name"]
        decls.append(f"{doc_lines(r['doc'])}Tensor {n}(const Tensor& a{api_params(t, r, True)});\n")
        sets = "".join(f"  attrs.{a} = {a};\n" for a in r["attrs"])
        defs.append(f"Tensor {n}(const Tensor& a{api_params(t, r, False)}) {{\n"
                    f"  Attrs attrs;\n{sets}  return detail::unary_op(OpId::{n}, a, attrs);\n}}\n")
    h = (HEADER + "/// \\file\n/// The ops generated from core/ops.yaml's rows with `api: true` (included "
         "by core/ops.h).\n"
         "#pragma once\n\nnamespace ember {\n\n" + "".join(decls) + "\n}  // namespace ember\n")
    c = (HEADER + '#include "core/ops.h"\n\nnamespace ember {\n\n' + "\n".join(defs) +
         "\n}  // namespace ember\n")
    return h, c


def gen_nn(t):
    fdecl, fdef, mdecl, mdef = [], [], [], []
    for r in t.rows:
        nn = r["nn"]
        if not nn:
            continue
        n = r["name"]
        fn = nn.get("functional", n)
        call_args = "".join(f", {a}" for a in r["attrs"])
        fdecl.append(doc_lines(r["doc"], f"The functional form of ember::{n}: ") +
                     f"Tensor {fn}(const Tensor& x{api_params(t, r, True)});\n")
        fdef.append(f"Tensor {fn}(const Tensor& x{api_params(t, r, False)}) {{\n"
                    f"  return ember::{n}(x{call_args});\n}}\n")
        mod = nn.get("module")
        if not mod:
            continue
        if r["attrs"]:
            first = r["attrs"][0]
            fty, fdefault = t.attrs[first]
            ctor = (f"  /// Options with `{first}` given (so `{mod}({fdefault})` reads well).\n"
                    f"  {mod}Options({TYPES[fty][1]} {first} = {fdefault}) : {first}_({first}) "
                    f"{{}}  // NOLINT: {mod}({fdefault}) reads well\n")
            args = "".join(f"  /// `{a}` of ember::{n} (default {t.attrs[a][1]}).\n"
                           f"  EMBER_ARG({TYPES[t.attrs[a][0]][0]}, {a}) = {t.attrs[a][1]};\n"
                           for a in r["attrs"])
            mdecl.append(f"/// Options of {mod} (the arguments of ember::{n}).\n"
                         f"struct {mod}Options {{\n{ctor}{args}}};\n\n"
                         + doc_lines(r["doc"], f"The module form of ember::{n}: ") +
                         f"class {mod}Impl : public Module {{\n public:\n"
                         f"  /// A module applying ember::{n} with these options.\n"
                         f"  explicit {mod}Impl(const {mod}Options& options = {{}}) "
                         f": options(options) {{}}\n"
                         f"  /// ember::{n} of `x`, elementwise: any shape.\n"
                         f"  Tensor forward(const Tensor& x);\n"
                         f"  /// Prints `{mod}(` and the options `)`.\n"
                         f"  void pretty_print(std::ostream& os) const override;\n\n"
                         f"  {mod}Options options;  ///< what forward passes to ember::{n}\n}};\n"
                         f"/// The module holder of {mod}Impl (a shared pointer, like libtorch's).\n"
                         f"EMBER_MODULE({mod});\n")
            opt_args = "".join(f", options.{a}()" for a in r["attrs"])
            shown = ' << ", " '.join(f'<< "{a}=" << options.{a}()' for a in r["attrs"])
            mdef.append(f"Tensor {mod}Impl::forward(const Tensor& x) {{\n"
                        f"  return functional::{fn}(x{opt_args});\n}}\n"
                        f"void {mod}Impl::pretty_print(std::ostream& os) const {{\n"
                        f"  os << \"{mod}(\" {shown} << \")\";\n}}\n")
        else:
            mdecl.append(doc_lines(r["doc"], f"The module form of ember::{n}: ") +
                         f"class {mod}Impl : public Module {{\n public:\n"
                         f"  /// ember::{n} of `x`, elementwise: any shape.\n"
                         f"  Tensor forward(const Tensor& x);\n"
                         f"  /// Prints `{mod}()`.\n"
                         f"  void pretty_print(std::ostream& os) const override "
                         f"{{ os << \"{mod}()\"; }}\n}};\n"
                         f"/// The module holder of {mod}Impl (a shared pointer, like libtorch's).\n"
                         f"EMBER_MODULE({mod});\n")
            mdef.append(f"Tensor {mod}Impl::forward(const Tensor& x) "
                        f"{{ return functional::{fn}(x); }}\n")
    hf = (HEADER + "/// \\file\n/// The functional forms generated from core/ops.yaml's rows with `nn` "
          "(included by nn/functional.h).\n"
          "#pragma once\n\n#include \"core/tensor.h\"\n\nnamespace ember::nn::functional {\n\n" +
          "".join(fdecl) + "\n}  // namespace ember::nn::functional\n")
    hm = (HEADER + "/// \\file\n/// The activation modules generated from core/ops.yaml's rows with "
          "`nn.module` (included by\n/// nn/activation.h).\n"
          "#pragma once\n#include <ostream>\n\n#include \"nn/holder.h\"\n"
          "#include \"nn/module.h\"\n#include \"nn/options.h\"\n\nnamespace ember::nn {\n\n" +
          "\n".join(mdecl) + "\n}  // namespace ember::nn\n")
    c = (HEADER + '#include "core/ops.h"\n#include "nn/activation.h"\n#include "nn/functional.h"'
         "\n\nnamespace ember::nn {\nnamespace functional {\n\n" + "\n".join(fdef) +
         "\n}  // namespace functional\n\n" + "\n".join(mdef) + "\n}  // namespace ember::nn\n")
    return hf, hm, c


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    src, out = argv[1], argv[2]
    try:
        with open(src) as f:
            data = yaml.safe_load(f)
        t = Table(data)
        for r in t.rows:
            if r.get("grad"):
                r["grad_src"] = data["ops"][r["name"]]["grad"]
        api_h, api_c = gen_api(t)
        nn_f, nn_m, nn_c = gen_nn(t)
        files = {
            "core/generated/op_ids.h": gen_op_ids(t),
            "core/generated/op_info.h": gen_op_info(t),
            "core/generated/attrs.h": gen_attrs_h(t),
            "core/generated/op_table.cpp": gen_op_table_cpp(t),
            "core/generated/ops_api.h": api_h,
            "core/generated/ops_api.cpp": api_c,
            "kernels/generated/pointwise_functors.h": gen_functors(t),
            "kernels/generated/make_functor.h": gen_make_functor(t),
            "nn/generated/functional.h": nn_f,
            "nn/generated/activation.h": nn_m,
            "nn/generated/activation.cpp": nn_c,
        }
    except (GenError, yaml.YAMLError) as e:
        print(f"{src}: {e}", file=sys.stderr)
        return 1
    for rel, text in files.items():
        write(os.path.join(out, rel), text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
