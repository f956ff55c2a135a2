#!/usr/bin/env python3
"""Turns a .cu file into C++ for the emulated device (cmake -DHT_CUDA_EMULATION=ON).

Two rewrites, nothing else, and no line moves (so the compiler's messages
name the .cu file's own lines):
  kernel<<<grid, block[, smem[, stream]]>>>(args)
      -> ::ht::emu::launch("kernel", kernel, grid, block, ...)(args)
     or, for a kernel template whose arguments the call deduces,
      -> ::ht::emu::launch_deduced("kernel", [](auto... a) { kernel(a...); }, grid, ...)(args)
  extern __shared__ [__align__(n)] T name[];
      -> T* name = ::ht::emu::dynamic_shared<T>();
Usage: rewrite_launches.py IN.cu OUT.cc
"""
import re
import sys

IDENT = re.compile(r"[A-Za-z0-9_:]")
DYNAMIC_SHARED = re.compile(r"extern\s+__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s+)?([^;\[]*?)\s*(\w+)\s*\[\s*\]\s*;")


def kernel_templates(text):
    """Names of the __global__ functions declared as templates."""
    names = set()
    for m in re.finditer(r"template\s*<[^;{]*?>\s*__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s+)?(\w+)", text):
        names.add(m.group(1))
    return names


def kernel_start(text, end):
    """Start of the kernel expression that ends at `end` (name, then <template args>)."""
    i = end
    if text[i - 1] == ">":
        depth = 0
        while True:
            i -= 1
            if text[i] == ">":
                depth += 1
            elif text[i] == "<":
                depth -= 1
                if depth == 0:
                    break
    while i > 0 and IDENT.match(text[i - 1]):
        i -= 1
    return i


def rewrite(text, path):
    templates = kernel_templates(text)
    out, pos = [], 0
    while True:
        open_at = text.find("<<<", pos)
        if open_at < 0:
            break
        end = open_at
        while text[end - 1].isspace():
            end -= 1
        start = kernel_start(text, end)
        kernel = text[start:end]
        gap = text[end:open_at]  # whitespace (perhaps a newline) kept in place
        close_at = text.find(">>>", open_at)
        paren = close_at + 3
        while text[paren].isspace():
            paren += 1
        if close_at < 0 or text[paren] != "(":
            sys.exit(f"{path}: a launch of {kernel!r} that this rewrite does not understand")
        config = text[open_at + 3:close_at]
        name = kernel.replace('"', "")
        if kernel in templates:  # a template called without <...>: deduced from the arguments
            call = f"::ht::emu::launch_deduced(\"{name}\", [](auto... a) {{ {kernel}(a...); }}{gap}, {config})"
        else:
            call = f"::ht::emu::launch(\"{name}\", {kernel}{gap}, {config})"
        out.append(text[pos:start])
        out.append(call)
        out.append(text[close_at + 3:paren])
        pos = paren
    out.append(text[pos:])
    text = "".join(out)
    return DYNAMIC_SHARED.sub(lambda m: f"{m.group(1)}* {m.group(2)} = ::ht::emu::dynamic_shared<{m.group(1)}>();", text)


def main():
    src, dst = sys.argv[1], sys.argv[2]
    with open(src) as f:
        text = f.read()
    body = rewrite(text, src)
    with open(dst, "w") as f:
        f.write(f'#line 1 "{src}"\n' + body)


if __name__ == "__main__":
    main()
