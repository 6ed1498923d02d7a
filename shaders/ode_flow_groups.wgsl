// FLOATER's flow on GPUs (continues ode_flow.wgsl): one workgroup per row of the state (a block).
// Its 256 threads keep the row's vectors in workgroup memory and share every matrix-vector
// product (below), with a barrier between dependent steps. The solve is a chain of such steps,
// so its time is their count: the thread that finishes an element of a slope also combines that
// element into the next stage's input (`after_slope`), so no pass of its own and no barrier
// does it. Each row's dθ terms go to lane b % 4 of its quad's records, which
// theta_from_records sums.

const GROUP_WG: u32 = 256u;
// Threads per output of a product (pair_sum adds two), and so outputs per pass of the workgroup.
const SPLIT: u32 = 2u;
const OUTS_PER_PASS: u32 = GROUP_WG / SPLIT;

var<workgroup> vecs: array<array<f32, MAX_DIM>, 12>;
var<workgroup> hy: array<f32, MAX_DIM>;
var<workgroup> hdz: array<f32, MAX_DIM>;
var<workgroup> first_bad: atomic<u32>;
// A product's two parts per output meet through `pair_sum` (group_tree.wgsl or
// group_subgroups.wgsl): in its workgroup memory (2 KiB; with vecs, hy and hdz, 16 KiB,
// WebGPU's default workgroup memory) after a barrier, or by a subgroup shuffle without one.

// forward: the state handed between dispatches, [blocks, d].
@group(0) @binding(6) var<storage, read_write> fwd_carry: array<f32>;
// backprop, adjoint: the state handed between dispatches, [blocks, 2d].
@group(0) @binding(6) var<storage, read_write> carry: array<f32>;
// The records as f32s: each workgroup writes its own lane.
@group(0) @binding(8) var<storage, read_write> rec_f: array<f32>;

// Products are cooperative: two threads per output, each summing every other term (adjacent
// threads read adjacent θ), their partial sums added in order by the first of them. So a
// product's latency is half its length plus a barrier (none with subgroups), not its length, and
// d = k = 128 takes one pass of the 256 threads. FLOATER's bench step on an H200 (BENCHMARKS.md): 74 ms with four
// threads per output and one running sum each, 47.5 ms with four sums, 48 ms with eight, 40.6 ms
// with eight sums and two threads per output (half the passes and barriers).

// A source vector of a product: a slot of vecs, or hy (HY_SRC) or hdz (HDZ_SRC).
const HY_SRC: u32 = 12u;
const HDZ_SRC: u32 = 13u;

fn src_at(src: u32, c: u32) -> f32 {
    if (src == HY_SRC) {
        return hy[c];
    }
    if (src == HDZ_SRC) {
        return hdz[c];
    }
    return vecs[src][c];
}

// This thread's part of Σ_{c < n} θ[first + c·in_step] · src[c] (every SPLIT-th term). Eight
// terms at a time into eight sums: their loads are independent, so a GPU overlaps their
// latencies where one running sum would wait for each load in turn (the solve is a chain of
// these products).
fn part_dot(first: u32, in_step: u32, n: u32, src: u32, part: u32) -> f32 {
    var s0 = 0.0;
    var s1 = 0.0;
    var s2 = 0.0;
    var s3 = 0.0;
    var s4 = 0.0;
    var s5 = 0.0;
    var s6 = 0.0;
    var s7 = 0.0;
    let step = SPLIT * in_step;
    var c = part;
    for (; c + 7u * SPLIT < n; c += 8u * SPLIT) {
        let at = first + c * in_step;
        s0 += theta[at] * src_at(src, c);
        s1 += theta[at + step] * src_at(src, c + SPLIT);
        s2 += theta[at + 2u * step] * src_at(src, c + 2u * SPLIT);
        s3 += theta[at + 3u * step] * src_at(src, c + 3u * SPLIT);
        s4 += theta[at + 4u * step] * src_at(src, c + 4u * SPLIT);
        s5 += theta[at + 5u * step] * src_at(src, c + 5u * SPLIT);
        s6 += theta[at + 6u * step] * src_at(src, c + 6u * SPLIT);
        s7 += theta[at + 7u * step] * src_at(src, c + 7u * SPLIT);
    }
    for (; c < n; c += SPLIT) {
        s0 += theta[first + c * in_step] * src_at(src, c);
    }
    return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7));
}

// hy = σ(z), z = W1·[vecs[x]; t] + b1. Ends with a barrier.
fn hidden_layer(t: f32, x: u32, lane: Lane) {
    let d = p.d;
    let k = p.k;
    let slot = pair_slot(lane);
    let part = slot % SPLIT;
    for (var base = 0u; base < k; base += OUTS_PER_PASS) {
        let j = base + slot / SPLIT;
        var mine = vec2(0.0, 0.0);
        if (j < k) {
            mine.x = part_dot(j * (d + 1u), 1u, d, x, part);
        }
        let z = pair_sum(lane, mine).x;
        if (j < k && part == 0u) {
            hy[j] = act(z + theta[j * (d + 1u) + d] * t + theta[b1_offset() + j]);
        }
        workgroupBarrier();
    }
}

// hy = σ(z) and hdz = σ'(z) ⊙ W2[:, :k]ᵀ vecs[a] at (t, vecs[x]). Ends with a barrier. (Apart from
// hidden_layer so that the forward's workgroup memory stays within 16 KiB.)
fn hidden_and_vjp(t: f32, x: u32, a: u32, lane: Lane) {
    let d = p.d;
    let k = p.k;
    let slot = pair_slot(lane);
    let part = slot % SPLIT;
    for (var base = 0u; base < k; base += OUTS_PER_PASS) {
        let j = base + slot / SPLIT;
        var mine = vec2(0.0, 0.0);
        if (j < k) {
            mine = vec2(part_dot(j * (d + 1u), 1u, d, x, part), part_dot(w2_offset() + j, k + 1u, d, a, part));
        }
        let sums = pair_sum(lane, mine);
        if (j < k && part == 0u) {
            let y = act(sums.x + theta[j * (d + 1u) + d] * t + theta[b1_offset() + j]);
            hy[j] = y;
            hdz[j] = sums.y * act_grad(y);
        }
        workgroupBarrier();
    }
}

// Slope i of a step, K_i = h(t, vecs[x]) into vecs[K0 + i]; callers put a barrier between writing
// x and calling, and it ends with one. The thread that writes element c of K_i (the first of its
// pair) wrote element c of every earlier slope too, so it goes on at once to what needs only
// element c: the next stage's input, or after the last stage the step's result in vecs[Z] when
// `finish`. That saves a pass over the state and a barrier per stage; the additions are the
// same, in the same order, as a pass of their own would make.
fn eval_slope(t: f32, x: u32, i: u32, dt: f32, finish: bool, lane: Lane) {
    hidden_layer(t, x, lane);
    let d = p.d;
    let k = p.k;
    let slot = pair_slot(lane);
    let part = slot % SPLIT;
    for (var base = 0u; base < d; base += OUTS_PER_PASS) {
        let c = base + slot / SPLIT;
        let row = w2_offset() + c * (k + 1u);
        var mine = vec2(0.0, 0.0);
        if (c < d) {
            mine.x = part_dot(row, 1u, k, HY_SRC, part);
        }
        let sum = pair_sum(lane, mine).x;
        if (c < d && part == 0u) {
            vecs[K0 + i][c] = sum + theta[row + k] * t + theta[b2_offset() + c];
            after_slope(c, i, dt, finish);
        }
        workgroupBarrier();
    }
}

// Element c of the input of stage i + 1 (z + dt·Σ_{j ≤ i} a_{i+1, j} K_j), or, after the last
// stage and when `finish`, of the step's result z + dt·Σ b_j K_j in place.
fn after_slope(c: u32, i: u32, dt: f32, finish: bool) {
    let next = i + 1u;
    let last = next >= p.stages;
    if (last && !finish) {
        return;
    }
    var v = vecs[Z][c];
    for (var j = 0u; j < next; j++) {
        let w = dt * combo_weight(next, j);
        if (w != 0.0) {
            v += w * vecs[K0 + j][c];
        }
    }
    vecs[select(next, Z, last)][c] = v;
}

// Row b's record of stage evaluation n at (t, vecs[x]) for a = vecs[a], from hy and hdz: lane b % 4
// of its quad's (see theta_from_records).
fn write_record(b: u32, n: u32, t: f32, x: u32, a: u32, coef: f32, lid: u32) {
    let d = p.d;
    let k = p.k;
    let at = record_at(b / 4u, n);
    let lane = b % 4u;
    for (var j = lid; j < k + 2u; j += GROUP_WG) {
        var y = 1.0;
        if (j < k) {
            y = hy[j];
            rec_f[(at + j) * 4u + lane] = coef * hdz[j];
        } else if (j == k) {
            y = t;
        }
        rec_f[(at + rec_v2() + j) * 4u + lane] = y;
    }
    for (var c = lid; c < d + 2u; c += GROUP_WG) {
        var xc = 1.0;
        if (c < d) {
            xc = vecs[x][c];
            rec_f[(at + rec_u2() + c) * 4u + lane] = coef * vecs[a][c];
        } else if (c == d) {
            xc = t;
        }
        rec_f[(at + rec_v1() + c) * 4u + lane] = xc;
    }
}

// Backprop through stage q of a step from t0 by dt, at (t, vecs[x]) with the slope's adjoint
// a = vecs[K0 + q]: the input's adjoint aᵀ ∂h/∂p (its element c by the thread that sums it)
// goes at once into the state's adjoint vecs[ZBAR0] and the adjoints of the earlier slopes
// (dt·a_{q,l} of it into vecs[K0 + l]), and row b's record of stage evaluation n (coef 1) is
// written. Inputs must be ready (barrier); it ends with a barrier.
fn vjp(t: f32, x: u32, q: u32, dt: f32, b: u32, n: u32, lane: Lane) {
    let a = K0 + q;
    hidden_and_vjp(t, x, a, lane);
    let d = p.d;
    let slot = pair_slot(lane);
    let part = slot % SPLIT;
    for (var base = 0u; base < d; base += OUTS_PER_PASS) {
        let c = base + slot / SPLIT;
        var mine = vec2(0.0, 0.0);
        if (c < d) {
            mine.x = part_dot(c, d + 1u, p.k, HDZ_SRC, part);
        }
        let ib = pair_sum(lane, mine).x;
        if (c < d && part == 0u) {
            vecs[ZBAR0][c] += ib;
            for (var l = 0u; l < q; l++) {
                vecs[K0 + l][c] += (dt * tab_a(q, l)) * ib;
            }
        }
        workgroupBarrier();
    }
    write_record(b, n, t, x, a, 1.0, lane.index);
    workgroupBarrier();
}

// The adjoint's stage q of a step from t0 by dt, at (t, vecs[x], vecs[a]): vecs[KP0 + q] =
// h(t, vecs[x]), vecs[KA0 + q] = −aᵀ ∂h/∂p, and row b's record of stage evaluation n with coef.
// Inputs must be ready (barrier); it ends with a barrier. As in `eval_slope`, the thread that
// writes element c of the slopes goes on to element c of the next stage's inputs (vecs[PIN],
// vecs[AIN]), or after the last stage of the step's result (vecs[P], vecs[A]): so the record,
// which reads this stage's inputs, is written first.
fn adjoint_stage(t: f32, x: u32, a: u32, q: u32, dt: f32, coef: f32, b: u32, n: u32, lane: Lane) {
    hidden_and_vjp(t, x, a, lane);
    write_record(b, n, t, x, a, coef, lane.index);
    workgroupBarrier();
    let d = p.d;
    let k = p.k;
    let slot = pair_slot(lane);
    let part = slot % SPLIT;
    for (var base = 0u; base < d; base += OUTS_PER_PASS) {
        let c = base + slot / SPLIT;
        let row = w2_offset() + c * (k + 1u);
        var mine = vec2(0.0, 0.0);
        if (c < d) {
            mine = vec2(part_dot(row, 1u, k, HY_SRC, part), part_dot(c, d + 1u, k, HDZ_SRC, part));
        }
        let sums = pair_sum(lane, mine);
        if (c < d && part == 0u) {
            vecs[KP0 + q][c] = sums.x + theta[row + k] * t + theta[b2_offset() + c];
            vecs[KA0 + q][c] = -sums.y;
            after_adjoint_slope(c, q, dt);
        }
        workgroupBarrier();
    }
}

// Element c of the next stage's inputs p + dt·Σ a_{q+1, l} KP_l and a + dt·Σ a_{q+1, l} KA_l, or
// after the last stage of the step's p and a (weights b) in place.
fn after_adjoint_slope(c: u32, q: u32, dt: f32) {
    let next = q + 1u;
    let last = next >= p.stages;
    var pv = vecs[P][c];
    var av = vecs[A][c];
    for (var l = 0u; l < next; l++) {
        let w = dt * combo_weight(next, l);
        if (w != 0.0) {
            pv += w * vecs[KP0 + l][c];
            av += w * vecs[KA0 + l][c];
        }
    }
    vecs[select(PIN, P, last)][c] = pv;
    vecs[select(AIN, A, last)][c] = av;
}

// The slopes K0.. of one step of vecs[Z] from t0 by dt (stage i > 0 reads its input from slot
// i), and with `finish` the step itself: vecs[Z] becomes the state after it.
fn stages(t0: f32, dt: f32, finish: bool, lane: Lane) {
    for (var i = 0u; i < p.stages; i++) {
        var x = Z;
        if (i > 0u) {
            x = i;
        }
        eval_slope(t0 + tab_c(i) * dt, x, i, dt, finish, lane);
    }
}

// One Runge-Kutta step of vecs[Z] from t0 by dt, in place.
fn rk_step(t0: f32, dt: f32, lane: Lane) {
    stages(t0, dt, true, lane);
}

@compute @workgroup_size(256)
fn forward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    lane: Lane,
) {
    let lid = lane.index;
    let b = block_index(wid, groups);
    if (b >= p.blocks) {
        return;
    }
    let d = p.d;
    let row = p.blocks * d;
    if (lid == 0u) {
        atomicStore(&first_bad, NO_FAILURE);
    }
    workgroupBarrier();
    for (var c = lid; c < d; c += GROUP_WG) {
        if (p.begin == 0u) {
            let v = p0[b * d + c];
            vecs[Z][c] = v;
            traj[b * d + c] = v;
            if (!is_finite(v)) {
                atomicMin(&first_bad, 0u);
            }
        } else {
            vecs[Z][c] = fwd_carry[b * d + c];
        }
    }
    workgroupBarrier();
    for (var g = p.begin; g < p.end; g++) {
        let ts = step_times(g);
        rk_step(ts.x, ts.y, lane);
        // A non-finite state stays non-finite, so the first non-finite output marks the failure.
        if (g % p.substeps == p.substeps - 1u) {
            let i = g / p.substeps + 1u;
            for (var c = lid; c < d; c += GROUP_WG) {
                let v = vecs[Z][c];
                traj[i * row + b * d + c] = v;
                if (!is_finite(v)) {
                    atomicMin(&first_bad, i);
                }
            }
        }
    }
    for (var c = lid; c < d; c += GROUP_WG) {
        fwd_carry[b * d + c] = vecs[Z][c];
    }
    workgroupBarrier();
    if (lid == 0u) {
        var earlier = NO_FAILURE;
        if (p.begin != 0u) {
            earlier = fail[b];
        }
        fail[b] = min(earlier, atomicLoad(&first_bad));
    }
}

// step_starts[g] ([steps, blocks, d]) = the state at the start of step g: the trajectory at each
// interval's start, then the substeps taken from it.
@compute @workgroup_size(256)
fn starts(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    lane: Lane,
) {
    let lid = lane.index;
    let b = block_index(wid, groups);
    if (b >= p.blocks) {
        return;
    }
    let d = p.d;
    let row = p.blocks * d;
    for (var g = p.begin; g < p.end; g++) {
        if (g % p.substeps == 0u) {
            let i = g / p.substeps;
            for (var c = lid; c < d; c += GROUP_WG) {
                vecs[Z][c] = traj_in[i * row + b * d + c];
            }
        } else {
            if (g == p.begin) {
                for (var c = lid; c < d; c += GROUP_WG) {
                    vecs[Z][c] = step_starts[(g - 1u) * row + b * d + c];
                }
            }
            workgroupBarrier();
            let ts = step_times(g - 1u);
            rk_step(ts.x, ts.y, lane);
        }
        for (var c = lid; c < d; c += GROUP_WG) {
            step_starts[g * row + b * d + c] = vecs[Z][c];
        }
    }
}

@compute @workgroup_size(256)
fn backprop(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    lane: Lane,
) {
    let lid = lane.index;
    let b = block_index(wid, groups);
    if (b >= p.blocks) {
        return;
    }
    let d = p.d;
    let row = p.blocks * d;
    // The first dispatch (the last steps) starts the adjoint of the state at 0.
    for (var c = lid; c < d; c += GROUP_WG) {
        if (p.end == total_steps()) {
            vecs[ZBAR][c] = 0.0;
        } else {
            vecs[ZBAR][c] = carry[b * d + c];
        }
    }
    workgroupBarrier();
    for (var g1 = p.end; g1 > p.begin; g1--) {
        let g = g1 - 1u;
        // The last substep of an interval ends at p(t_i): its adjoint gets the upstream there.
        let ends_position = g % p.substeps == p.substeps - 1u;
        let i = g / p.substeps + 1u;
        for (var c = lid; c < d; c += GROUP_WG) {
            if (ends_position) {
                vecs[ZBAR][c] += upstream[i * row + b * d + c];
            }
            vecs[Z][c] = step_starts[g * row + b * d + c];
        }
        workgroupBarrier();
        let ts = step_times(g);
        let t0 = ts.x;
        let dt = ts.y;
        stages(t0, dt, false, lane);
        // z₁ = z₀ + dt·Σ bᵢ kᵢ: the adjoints of z₀ and of every slope (the slopes' slots now hold them).
        for (var c = lid; c < d; c += GROUP_WG) {
            let zb = vecs[ZBAR][c];
            vecs[ZBAR0][c] = zb;
            for (var j = 0u; j < p.stages; j++) {
                vecs[K0 + j][c] = (dt * tab_b(j)) * zb;
            }
        }
        workgroupBarrier();
        // Stage q: k_q = h(t₀ + c_q dt, x_q), x_q = z₀ + dt·Σ_l a_ql k_l.
        for (var q1 = p.stages; q1 > 0u; q1--) {
            let q = q1 - 1u;
            var x = Z;
            if (q > 0u) {
                x = q;
            }
            vjp(t0 + tab_c(q) * dt, x, q, dt, b, (g - p.begin) * p.stages + q, lane);
        }
        for (var c = lid; c < d; c += GROUP_WG) {
            vecs[ZBAR][c] = vecs[ZBAR0][c];
        }
        workgroupBarrier();
    }
    for (var c = lid; c < d; c += GROUP_WG) {
        if (p.begin == 0u) {
            dp0[b * d + c] = vecs[ZBAR][c] + upstream[b * d + c];
        } else {
            carry[b * d + c] = vecs[ZBAR][c];
        }
    }
}

// Steps in backward order: h = m·substeps + u is substep u of the interval that ends at position
// positions − 1 − m, integrated from its end.
@compute @workgroup_size(256)
fn adjoint(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    lane: Lane,
) {
    let lid = lane.index;
    let b = block_index(wid, groups);
    if (b >= p.blocks) {
        return;
    }
    let d = p.d;
    let row = p.blocks * d;
    let crow = b * 2u * d;
    for (var c = lid; c < d; c += GROUP_WG) {
        if (p.begin == 0u) {
            vecs[A][c] = 0.0;
        } else {
            vecs[P][c] = carry[crow + c];
            vecs[A][c] = carry[crow + d + c];
        }
    }
    workgroupBarrier();
    for (var h = p.begin; h < p.end; h++) {
        let i = p.positions - 1u - h / p.substeps;
        let u = h % p.substeps;
        // At t_i: restart p from the forward solution and add the upstream of p(t_i).
        if (u == 0u) {
            for (var c = lid; c < d; c += GROUP_WG) {
                vecs[P][c] = traj_in[i * row + b * d + c];
                vecs[A][c] += upstream[i * row + b * d + c];
            }
            workgroupBarrier();
        }
        // Backward over [t_{i-1}, t_i]: negative steps.
        let span0 = f32(i) * p.delta;
        let span1 = f32(i - 1u) * p.delta;
        let t0 = grid_time(span0, span1, u);
        let dt = grid_time(span0, span1, u + 1u) - t0;
        for (var q = 0u; q < p.stages; q++) {
            // The first stage reads p and a themselves; the others, inputs the stage before wrote.
            var x = P;
            var a = A;
            if (q > 0u) {
                x = PIN;
                a = AIN;
            }
            // dp/dt = h, da/dt = −aᵀ ∂h/∂p, dg/dt = −aᵀ ∂h/∂θ (g only enters the step's result).
            let n = (h - p.begin) * p.stages + q;
            adjoint_stage(t0 + tab_c(q) * dt, x, a, q, dt, -(dt * tab_b(q)), b, n, lane);
        }
    }
    for (var c = lid; c < d; c += GROUP_WG) {
        if (p.end == total_steps()) {
            dp0[b * d + c] = vecs[A][c] + upstream[b * d + c];
        } else {
            carry[crow + c] = vecs[P][c];
            carry[crow + d + c] = vecs[A][c];
        }
    }
}
