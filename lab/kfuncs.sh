#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Prints what a kernel offers a sched_ext scheduler, read from its BTF: the
# C prototypes of every scx_bpf_* kfunc, struct sched_ext_ops, the kfunc
# argument structs and the scx_* enums (flags and constants). Diff the
# output for two kernels to see the API drift the BPF code must cope with.
#
# Usage: lab/kfuncs.sh [newest|older|VERSION] [--no-enums]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

sel=newest enums=1
for a in "$@"; do
	case $a in
	--no-enums) enums=0 ;;
	-*) die "usage: lab/kfuncs.sh [newest|older|VERSION] [--no-enums]" ;;
	*) sel=$a ;;
	esac
done
command -v bpftool >/dev/null || die "bpftool missing: run lab/deps.sh"
kdir=$("$LAB_DIR/kernel.sh" "$sel")
vmlinux=$kdir/vmlinux

echo "// kernel $(<"$kdir/release")"
echo "// scx_bpf_* functions in BTF; [kfunc] = tagged bpf_kfunc (callable from BPF)"
# C prototypes rebuilt from the JSON BTF (FUNC -> FUNC_PROTO -> params).
prog=$(cat <<'PY'
import json, sys, re
types = {t["id"]: t for t in json.load(sys.stdin)["types"]}
kfuncs = {t["type_id"] for t in types.values() if t["kind"] == "DECL_TAG" and t["name"] == "bpf_kfunc"}

def render(tid, name=""):
    """C declaration of type tid, declaring name."""
    if tid == 0:
        return ("void " + name).strip()
    t = types[tid]
    k = t["kind"]
    if k in ("INT", "FLOAT", "TYPEDEF"):
        return (t["name"] + " " + name).strip()
    if k in ("STRUCT", "UNION", "ENUM", "ENUM64", "FWD"):
        kw = {"STRUCT": "struct", "UNION": "union", "ENUM": "enum", "ENUM64": "enum"}.get(k)
        if k == "FWD":
            kw = "union" if t.get("fwd_kind") == "union" else "struct"
        return f"{kw} {t['name'] or '<anon>'} {name}".strip()
    if k in ("CONST", "VOLATILE", "RESTRICT"):
        q = k.lower()
        inner = types.get(t["type_id"])
        if inner and inner["kind"] == "PTR":  # qualifier applies to the pointer
            return render(t["type_id"], (q + " " + name).strip())
        return q + " " + render(t["type_id"], name)
    if k == "TYPE_TAG" or k == "DECL_TAG":
        return render(t["type_id"], name)
    if k == "PTR":
        inner = types.get(t["type_id"])
        if inner and inner["kind"] in ("FUNC_PROTO", "ARRAY"):
            return render(t["type_id"], "(*" + name + ")")
        return render(t["type_id"], "*" + name).replace(" *", " *")
    if k == "ARRAY":
        return render(t["type_id"], f"{name}[{t['nr_elems']}]")
    if k == "FUNC_PROTO":
        return render(t["ret_type_id"], f"{name}({params(t)})")
    return f"/*{k}*/ {name}"

def params(proto):
    ps = []
    for p in proto["params"]:
        if p["type_id"] == 0 and not p["name"]:
            ps.append("...")
        else:
            ps.append(render(p["type_id"], p["name"]))
    return ", ".join(ps) or "void"

out = []
for t in types.values():
    if t["kind"] == "FUNC" and re.match(r"_*scx_bpf_", t["name"]):
        decl = render(t["type_id"], t["name"])
        tag = "[kfunc]" if t["id"] in kfuncs else "[not a kfunc]"
        out.append((t["name"].lstrip("_"), f"{decl}; // {tag}"))
for _, line in sorted(out):
    print(re.sub(r"\* ", "*", line))
PY
)
bpftool -j btf dump file "$vmlinux" | python3 -c "$prog"

# The ops table, the argument structs of the kfuncs that take one, and the
# scx_* enums, as C, from the header dump.
bpftool btf dump file "$vmlinux" format c | awk -v enums="$enums" '
	/^struct (sched_ext_ops|scx_bpf_[a-z0-9_]*_args) \{/ { p = 1; print ""; }
	enums == 1 && /^enum scx_[a-z0-9_]* \{/ { p = 1; print ""; }
	p { print }
	p && /^\};/ { p = 0 }
'
