#!/usr/bin/env python3
"""Generates gmem's reference pages from the two tables the program itself uses, so they
cannot drift from it:

  OPTIONS  the GMEM_* options table (common/options.h), printed as tab-separated rows by
           build/docs/options_table (docs/gen/options_table.cpp): name, type, default, help,
           `gmem run` flag, category (tune, fallback, diagnosis, testing)
  HELP     `gmem --help-all`: the subcommands and their flags, as CLI11 prints them

Usage:
  gen-docs.py readme-table OPTIONS              README's option tables (Markdown): the options a
                                                user tunes, then fallback, diagnosis and testing
  gen-docs.py check-readme OPTIONS README.md    exit 1 with a diff if README's table differs
  gen-docs.py man-options OPTIONS VERSION       gmem-options(7)
  gen-docs.py man-gmem HELP OPTIONS VERSION     gmem(1)
  gen-docs.py completion HELP OPTIONS           bash completion for gmem
Standard library only.
"""
import difflib
import re
import sys

README_HEADER = "| variable | type | default | meaning |"
OTHERS_INTRO = ("Fallback, diagnosis and testing switches: leave them at their defaults unless a "
                "page of `docs/` or a gmem message points to one.")
OTHERS_HEADER = "| variable | kind | type | default | meaning |"
CATEGORIES = ("tune", "fallback", "diagnosis", "testing")


def read_options(path):
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            name, typ, default, help_text, flag, category = line.split("\t")
            if category not in CATEGORIES:
                sys.exit(f"gen-docs: {path}: {name}: unknown category '{category}'")
            rows.append({"name": name, "type": typ, "default": default, "help": help_text,
                         "flag": flag, "category": category})
    if not rows:
        sys.exit(f"gen-docs: {path}: no option rows")
    return rows


def tuned_first(rows):
    """(the options a user tunes, then the fallback, diagnosis and testing ones by category),
    each in table order."""
    return ([r for r in rows if r["category"] == "tune"],
            sorted((r for r in rows if r["category"] != "tune"),
                   key=lambda r: CATEGORIES.index(r["category"])))


def readme_table(rows):
    def md(text):
        return re.sub(r"\b(GMEM_[A-Z0-9_]+)\b", r"`\1`", text)
    tuned, others = tuned_first(rows)
    out = [README_HEADER, "| --- | --- | --- | --- |"]
    for r in tuned:
        out.append(f"| `{r['name']}` | {r['type']} | {r['default']} | {md(r['help'])} |")
    if others:
        out += ["", OTHERS_INTRO, "", OTHERS_HEADER, "| --- | --- | --- | --- | --- |"]
        for r in others:
            out.append(f"| `{r['name']}` | {r['category']} | {r['type']} | {r['default']} | "
                       f"{md(r['help'])} |")
    return out


def check_readme(rows, readme):
    with open(readme, encoding="utf-8") as f:
        lines = f.read().splitlines()
    try:
        start = lines.index(README_HEADER)
    except ValueError:
        print(f"{readme}: no option table (a line '{README_HEADER}')")
        return 1
    want = readme_table(rows)
    end = min(start + len(want), len(lines))
    while end < len(lines) and lines[end].startswith("|"):  # rows beyond the generated ones
        end += 1
    have = lines[start:end]
    if have == want:
        print(f"{readme}: option table matches common/options.h ({len(rows)} options)")
        return 0
    print(f"{readme}: option table differs from common/options.h; the generated table "
          f"(scripts/gen-docs.py readme-table) on the + side:")
    sys.stdout.writelines(l + "\n" for l in difflib.unified_diff(
        have, want, "README.md", "generated", lineterm="", n=0))
    return 1


def roff(text):
    """Escapes running text for roff."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    if text.startswith((".", "'")):
        text = "\\&" + text
    return text


def man_options(rows, version):
    out = [
        f'.TH GMEM-OPTIONS 7 "" "gmem {version}" "gmem"',
        ".SH NAME",
        "gmem-options \\- environment variables read by libgmem.so",
        ".SH DESCRIPTION",
        "libgmem.so, the shim that",
        ".BR gmem (1)",
        "preloads into a CUDA program, reads these variables once at start\\-up.",
        ".B gmem run",
        "sets each of them from the flag named beside it below, or from",
        ".BR \\-e\\ GMEM_NAME=VALUE .",
        "A value that does not parse prints one line such as",
        ".PP",
        ".RS",
        "gmem: warning: GMEM_LIMIT='12X' is not a size; using no limit",
        ".RE",
        ".PP",
        "and the default is used.",
        ".SH TYPES",
        ".TP", ".B flag", "0 or 1 (also yes/no, on/off, true/false)",
        ".TP", ".B count", "a non\\-negative integer",
        ".TP", ".B size", "bytes, with an optional K, M or G suffix",
        ".TP", ".B size or %", "a size, or a percentage of the device's memory (50%)",
        ".TP", ".B text", "any string",
        ".TP", ".B duration", "a number with a unit: 250ms, 30s, 5m",
        ".SH OPTIONS",
    ]
    tuned, others = tuned_first(rows)
    for r in tuned:
        out += [".TP", f"\\fB{r['name']}\\fR ({roff(r['type'])}; default: {roff(r['default'])}; "
                f"\\fBgmem run {roff(r['flag'])}\\fR)", roff(r["help"])]
    if others:
        out += [".SH FALLBACK, DIAGNOSIS AND TESTING OPTIONS",
                "Leave these at their defaults unless a gmem message or its documentation "
                "points to one."]
    for r in others:
        out += [".TP", f"\\fB{r['name']}\\fR ({r['category']}; {roff(r['type'])}; "
                f"default: {roff(r['default'])}; \\fBgmem run {roff(r['flag'])}\\fR)",
                roff(r["help"])]
    out += [
        ".SH OTHER VARIABLES",
        ".TP", ".B GMEM_LIB",
        "read by",
        ".BR gmem\\ run :",
        "the libgmem.so to preload (default: ../lib/libgmem.so beside the gmem executable).",
        ".TP", ".B GMEM_CLIENT_LIB",
        "read by the Python package: the libgmem_client.so (or libgmem.so) it loads.",
        ".SH SEE ALSO",
        ".BR gmem (1)",
    ]
    return out


def parse_help(path):
    """`gmem --help-all` -> (summary, top options, [subcommand], footer lines)."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    summary = lines[0].split(": ", 1)[-1] if lines else ""
    subs, top_opts, footer = [], [], []
    section, sub, group = "top", None, None
    i = 0
    while i < len(lines):
        line = lines[i]
        indent = len(line) - len(line.lstrip(" "))
        body = line.strip()
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if line == "Subcommands:":
            section = "subs"
        elif section == "top" and indent == 2 and body and not body.endswith(":"):
            parts = re.split(r"\s{2,}", body, maxsplit=1)
            top_opts.append((parts[0], parts[1] if len(parts) > 1 else ""))
        elif section == "subs" and indent == 0 and re.fullmatch(r"[a-z][a-z0-9-]*", body) \
                and nxt.startswith("  "):
            sub = {"name": body, "desc": "", "groups": []}
            subs.append(sub)
            group = None
        elif section == "subs" and indent == 0 and body:
            section = "footer"
            footer.append(line)
        elif section == "footer":
            footer.append(line)
        elif sub is not None and indent == 2 and body:
            if body.endswith(":"):
                group = {"title": body[:-1], "entries": []}
                sub["groups"].append(group)
            else:
                sub["desc"] = (sub["desc"] + " " + body).strip()
        elif sub is not None and group is not None and indent >= 4 and body:
            parts = re.split(r"\s{2,}", body, maxsplit=1)
            if indent == 4:
                desc = parts[1] if len(parts) > 1 else ""
                if not desc and nxt.startswith(" " * 6) and nxt.strip():
                    desc = nxt.strip()
                    i += 1
                group["entries"].append([parts[0], desc])
            elif group["entries"]:
                group["entries"][-1][1] = (group["entries"][-1][1] + " " + body).strip()
        i += 1
    while footer and not footer[-1].strip():
        footer.pop()
    if not subs:
        sys.exit(f"gen-docs: {path}: no subcommands found (not `gmem --help-all` output?)")
    return summary, top_opts, subs, footer


def option_names(spec):
    """'-e,--env TEXT ...' -> ['-e', '--env']; a positional -> []."""
    first = spec.split(" ")[0]
    return [n for n in first.split(",") if n.startswith("-")]


def man_gmem(help_path, rows, version):
    summary, top_opts, subs, footer = parse_help(help_path)
    out = [
        f'.TH GMEM 1 "" "gmem {version}" "User Commands"',
        ".SH NAME",
        f"gmem \\- {roff(summary)}",
        ".SH SYNOPSIS",
        ".B gmem",
        ".I command",
        "[options] [arguments]",
        ".br",
        ".B gmem run",
        "[options] [\\-\\-]",
        ".I program",
        "[arguments]",
        ".SH DESCRIPTION",
        ".B gmem",
        "launches programs under libgmem.so (an LD_PRELOAD shim that serves a CUDA program's",
        "device and pinned\\-host allocations from a caching pool and records every allocation",
        "into a shared\\-memory trace), and reads the traces of running, exited or crashed",
        "processes: live view, leak and fragmentation reports, HTML report, exports.",
        "This page is generated from",
        ".BR \"gmem \\-\\-help\\-all\" ;",
        "the GMEM_* variables are in",
        ".BR gmem-options (7).",
        ".SH OPTIONS",
    ]
    for name, desc in top_opts:
        out += [".TP", f".B {roff(name)}", roff(desc)]
    out.append(".SH COMMANDS")
    for s in subs:
        out += [f".SS {s['name']}", roff(s["desc"])]
        for g in s["groups"]:
            out += [".PP", f".I {roff(g['title'])}"]
            for spec, desc in g["entries"]:
                out += [".TP", f".B {roff(spec)}", roff(desc)]
    out += [".SH NOTES"]
    for line in footer:
        out.append(roff(line.strip()) if line.strip() else ".PP")
    out += [
        ".SH ENVIRONMENT",
        "The shim's options (GMEM_LIMIT, GMEM_TRACE, ...): see",
        ".BR gmem-options (7).",
        ".TP", ".B GMEM_LIB",
        "the libgmem.so that",
        ".B gmem run",
        "preloads; by default ../lib/libgmem.so relative to the gmem executable.",
        ".SH FILES",
        ".TP", ".I /dev/shm/gmem.PID.TICKS.NONCE",
        "the trace of each traced process, kept after it exits until",
        ".BR \"gmem clean\" .",
        ".TP", ".I PREFIX/lib/libgmem.so",
        "the shim; its helper libraries (libunwind, elfutils) are in PREFIX/lib/gmem/.",
        ".SH SEE ALSO",
        ".BR gmem-options (7)",
    ]
    return out


def completion(help_path, rows):
    _, top_opts, subs, _ = parse_help(help_path)
    top = " ".join(n for spec, _ in top_opts for n in option_names(spec))
    cases, choices = [], []
    for s in subs:
        names = [n for g in s["groups"] for spec, _ in g["entries"] for n in option_names(spec)]
        cases.append(f"    {s['name']}) opts=\"{' '.join(names + ['--help'])}\" ;;")
        for g in s["groups"]:
            for spec, _ in g["entries"]:
                m = re.search(r":\{([^}]*)\}", spec)
                if m:
                    for n in option_names(spec):
                        choices.append(f"    {s['name']}:{n}) COMPREPLY=($(compgen -W "
                                       f"\"{m.group(1).replace(',', ' ')}\" -- \"$cur\")); "
                                       "return ;;")
    env_words = " ".join(r["name"] + "=" for r in rows)
    sub_names = " ".join(s["name"] for s in subs)
    return f"""# bash completion for gmem. Generated by scripts/gen-docs.py from `gmem --help-all`
# and the GMEM_* options table; do not edit.
_gmem() {{
  local cur=${{COMP_WORDS[COMP_CWORD]}} prev=${{COMP_WORDS[COMP_CWORD-1]}}
  local sub="" i opts
  for ((i = 1; i < COMP_CWORD; i++)); do
    case ${{COMP_WORDS[i]}} in
      -*) ;;
      *) sub=${{COMP_WORDS[i]}}; break ;;
    esac
  done
  if [[ -z $sub ]]; then
    COMPREPLY=($(compgen -W "{sub_names} {top}" -- "$cur"))
    return
  fi
  if [[ $sub == run ]]; then  # after `--` or the program's name: complete the program
    local j
    for ((j = i + 1; j < COMP_CWORD; j++)); do
      if [[ ${{COMP_WORDS[j]}} == -- ]] || [[ ${{COMP_WORDS[j]}} != -* && ${{COMP_WORDS[j-1]}} != -* ]]; then
        if declare -F _command_offset >/dev/null; then _command_offset $((j + 1)); else
          COMPREPLY=($(compgen -c -f -- "$cur")); fi
        return
      fi
    done
  fi
  case $sub:$prev in
    *:-e | *:--env) compopt -o nospace 2>/dev/null
      COMPREPLY=($(compgen -W "{env_words}" -- "$cur")); return ;;
{chr(10).join(choices)}
  esac
  case $sub in
{chr(10).join(cases)}
    *) opts="--help" ;;
  esac
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
  else
    COMPREPLY=($(compgen -f -- "$cur"))
  fi
}}
complete -F _gmem gmem
""".splitlines()


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    cmd = argv[1]
    if cmd == "readme-table" and len(argv) == 3:
        out = readme_table(read_options(argv[2]))
    elif cmd == "check-readme" and len(argv) == 4:
        return check_readme(read_options(argv[2]), argv[3])
    elif cmd == "man-options" and len(argv) == 4:
        out = man_options(read_options(argv[2]), argv[3])
    elif cmd == "man-gmem" and len(argv) == 5:
        out = man_gmem(argv[2], read_options(argv[3]), argv[4])
    elif cmd == "completion" and len(argv) == 4:
        out = completion(argv[2], read_options(argv[3]))
    else:
        sys.exit(__doc__)
    sys.stdout.write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
