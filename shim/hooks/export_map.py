#!/usr/bin/env python3
"""Writes libgpumem.map: the template (libgpumem.map.in) with @DRIVER_HOOKS@ replaced by every hook
that driver/entry_points.def lists (its HOOK entries and HOOK_ONLY entries), one `name;` a line.

  export_map.py ENTRY_POINTS_DEF TEMPLATE OUTPUT
"""
import re
import sys

ENTRY = re.compile(r'^GPUMEM_DRIVER_ENTRY\((\w+),\s*\w+,\s*\d+,\s*\w+,\s*(CALL|HOOK)\)', re.MULTILINE)
HOOK_ONLY = re.compile(r'^GPUMEM_DRIVER_HOOK_ONLY\((\w+),', re.MULTILINE)


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    definitions, template, output = sys.argv[1:]
    with open(definitions) as file:
        text = file.read()
    hooks = [name for name, use in ENTRY.findall(text) if use == 'HOOK'] + HOOK_ONLY.findall(text)
    if not hooks:
        print(f'export_map.py: no hooks found in {definitions}', file=sys.stderr)
        return 1
    with open(template) as file:
        body = file.read()
    marker = '    @DRIVER_HOOKS@\n'
    if marker not in body:
        print(f'export_map.py: {template} has no line "{marker.strip()}"', file=sys.stderr)
        return 1
    body = body.replace(marker, ''.join(f'    {name};\n' for name in hooks))
    with open(output, 'w') as file:
        file.write(body)
    return 0


if __name__ == '__main__':
    sys.exit(main())
