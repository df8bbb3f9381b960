"""SDCA for l2-regularised logistic regression (l2 = 1) with linea's logit Newton step and an
inner step tolerance, in plain Python: a model of the rules of engine/src/cocoa/step_tolerance.rs,
to see per epoch how many rows an inner tolerance leaves, how many Newton iterations a row
takes, and the duality gap (docs/benchmarks/cocoa-k1-against-liblinear.md, "Inexact logistic steps").

    python bench/peers/sdca_tolerance_sim.py DATASET RULE EPOCHS

DATASET: a set the peer harness has featurised (bench-work/DATASET/data.npz under $LINEA_CACHE).
RULE: exact | liblinear (1e-2, tenfold tighter after a pass with <= n/10 Newton steps) |
progress (n tau^2/4 <= the last progress) | progress10 (<= a tenth of it) | rate (<= half
the last progress times its rate: linea's rule) | gap (from the last gap: a rejected candidate,
it makes the gap schedule change the trajectory). Its row order is Python's, not linea's, so
gaps differ from linea's runs in their last digits; it is slow (pure Python), for small sets.
"""
import sys, os, math, random
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_peers as rp
ds, rule, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3])
data = rp.load_npz(os.path.join(os.environ.get("LINEA_CACHE", os.path.expanduser("~/.cache/linea")), "bench-work", ds, "data.npz"))
tr = data["train"]; X = tr.X.tocsr(); y = tr.y("logistic")
n, d = X.shape
rows = [(X.indices[X.indptr[i]:X.indptr[i+1]].tolist(), X.data[X.indptr[i]:X.indptr[i+1]].tolist()) for i in range(n)]
norms = [sum(v*v for v in r[1]) for r in rows]
lam = 2.0
w = [0.0]*d
alpha = [0.0]*n
def sig(t):
    return 1/(1+math.exp(-t)) if t >= 0 else math.exp(t)/(1+math.exp(t))
def step(b0, my, q, tol):
    # returns (t, iterations, skipped)
    at_zero = my + q*(0.5-b0)
    if at_zero == 0: return 0.0, 0, False
    side = 1.0 if at_zero > 0 else -1.0
    lo, hi = -my - q*(1-b0), -my + q*b0
    if 0 < b0 < 1:
        warm = math.log(b0/(1-b0))
        if tol > 0 and abs(warm + my) <= tol:
            return warm, 0, True
    else:
        warm = 0.0 if b0 == 0.5 else (-1e300 if b0 == 0 else 1e300)
    warm = max(lo, min(hi, warm))
    t = min(warm, 0.0) if side > 0 else max(warm, 0.0)
    for it in range(1, 1000):
        e = math.exp(-abs(t)); r = e/(1+e)
        h = t + my + q*(((1-b0)-r) if t >= 0 else (r-b0))
        if h == 0: return t, it, False
        if tol > 0 and abs(h) <= tol:
            b = sig(t); dd = abs(b - b0) - 0.25*abs(h)
            if dd > 0 and 0.5*h*h <= (q+4)*dd*dd:
                return t, it, False
        curv = r/(1+e)
        nxt = t - h/(1+q*curv)
        nxt = min(nxt, 0.0) if side > 0 else max(nxt, 0.0)
        if it > 1 and (nxt - t)*side > 0: return t, it, False
        dt = nxt - t
        if dt*dt <= 2.2e-16*max(abs(t), 1.0): return nxt, it, False
        t = nxt
    return t, 1000, False
def objective():
    P = sum(math.log1p(math.exp(-abs(m))) + max(-m, 0) for m in
            (y[i]*sum(w[j]*v for j, v in zip(*rows[i])) for i in range(n))) + sum(x*x for x in w)
    conj = sum((b*math.log(b) if b > 0 else 0) + ((1-b)*math.log(1-b) if b < 1 else 0) for b in (alpha[i]*y[i] for i in range(n)))
    D = -conj - sum(x*x for x in w)
    return P, D
rng = random.Random(1)
tol = 1e-2 if rule != "exact" else 0.0
gap_abs = None
prev_prog = 0.0
for ep in range(1, epochs+1):
    order = list(range(n)); rng.shuffle(order)
    newton = skipped = updated = 0; prog = 0.0
    for i in order:
        idx, val = rows[i]
        m = sum(w[j]*v for j, v in zip(idx, val))
        q = norms[i]/lam
        yi = y[i]; b0 = alpha[i]*yi
        t, it, sk = step(b0, m*yi, q, tol)
        newton += it
        if sk: skipped += 1; continue
        b = sig(t); delta = yi*b - alpha[i]
        if delta != 0:
            alpha[i] = yi*b; updated += 1; prog += 0.5*q*delta*delta
            s = delta/lam
            for j, v in zip(idx, val): w[j] += s*v
    P, D = objective()
    print(f"{ep:3d} tol={tol:.1e} newton/row={newton/n:.2f} skipped={skipped/n:.2f} updated={updated/n:.2f} P={P:.10f} gap_rel={(P-D)/P:.2e}", flush=True)
    if rule == "liblinear" and newton <= n/10: tol = max(1e-8, tol*0.1)
    if rule == "gap": tol = min(1e-2, math.sqrt(0.8*(P-D)/n))
    if rule == "progress": tol = 0.0 if prog <= 0 else min(1e-2, 2*math.sqrt(prog/n))
    if rule == "progress10": tol = 0.0 if prog <= 0 else min(1e-2, 2*math.sqrt(0.1*prog/n))
    if rule == "rate":
        rate = min(1.0, prog/prev_prog) if prev_prog > 0 else 0.1
        t = 2*math.sqrt(0.5*rate*prog/n) if prog > 0 else 0.0
        tol = min(1e-2, t) if t > 0 else 0.0
    prev_prog = prog
