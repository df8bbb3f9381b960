"""A massif heap snapshot as a flat table: each allocation's bytes go to the nearest frame
of linea's own code on its call stack (a function of linea_* or a source file given
without a directory, as rustc's debug info names a workspace crate's files); what has no
such frame is 'other'. Used by bench/bytes-per-feature.sh.

    python3 bench/massif_sites.py massif.out.PID [SNAPSHOT|all]   (default: the peak)
"""
import re, sys
from collections import defaultdict

def snapshots(path):
    snaps, cur = [], None
    lines = open(path).read().split('\n')
    i = 0
    while i < len(lines):
        l = lines[i]
        if l.startswith('snapshot='):
            cur = {'n': int(l.split('=')[1])}
            snaps.append(cur)
        elif l.startswith('mem_heap_B='): cur['heap'] = int(l.split('=')[1])
        elif l.startswith('mem_heap_extra_B='): cur['extra'] = int(l.split('=')[1])
        elif l.startswith('heap_tree=') and l.split('=')[1] in ('detailed', 'peak'):
            cur['kind'] = l.split('=')[1]
            tree, i = parse(lines, i + 1)
            cur['tree'] = tree
            continue
        i += 1
    return snaps

NODE = re.compile(r'^( *)n(\d+): (\d+) (.*)$')
def parse(lines, i):
    # returns (node, next index); node = (bytes, desc, children)
    m = NODE.match(lines[i]); depth = len(m.group(1)); nchild = int(m.group(2))
    node = [int(m.group(3)), m.group(4), []]
    i += 1
    for _ in range(nchild):
        child, i = parse(lines, i)
        node[2].append(child)
    return node, i

OURS = re.compile(r'linea_(engine|worker|bench|proto)::|\(([a-z_0-9]+)\.rs:\d+\)$')
def attribute(node, out, path_ok=False):
    b, desc, kids = node
    d = re.sub(r'^0x[0-9A-F]+: ', '', desc)
    m = re.search(r'\(([^()]*):\d+\)$', d)
    fname = d.split('<')[0].split(' (')[0]
    ours = fname.startswith('linea') or fname.startswith('<linea') or (m is not None and '/' not in m.group(1) and fname not in ('UnknownInlinedFun',) and not fname.startswith('core::') and not fname.startswith('alloc::'))
    if ours:
        key = re.sub(r'^0x[0-9A-F]+: ', '', desc)
        key = re.sub(r'<[^()]*>', '', key)[:150]
        out[key] += b
        return
    if not kids:
        out['other: ' + re.sub(r'^0x[0-9A-F]+: ', '', desc)[:100]] += b
        return
    rest = b - sum(k[0] for k in kids)
    if rest: out['other (below threshold)'] += rest
    for k in kids: attribute(k, out)

path = sys.argv[1]
which = sys.argv[2] if len(sys.argv) > 2 else 'peak'
snaps = snapshots(path)
for s in snaps:
    if 'tree' not in s: continue
    if which != 'all' and s.get('kind') != 'peak' and str(s['n']) != which: continue
    out = defaultdict(int)
    for k in s['tree'][2]: attribute(k, out)
    print(f"== snapshot {s['n']} ({s.get('kind')}): heap {s['heap']/2**20:.1f} MiB, extra {s['extra']/2**20:.1f} MiB")
    for k, v in sorted(out.items(), key=lambda kv: -kv[1]):
        if v >= 2**19: print(f"{v/2**20:8.1f} MiB  {k}")
