// The backward passes of FLOATER's adaptive flow (continues ode_dopri5.wgsl, whose tableau, field,
// vector-Jacobian products and step controller they share): `record` keeps the forward's steps on
// a tape, `backprop` differentiates them in reverse, `adjoint` solves the adjoint system backward,
// and `finish` writes dθ, dp0 and the backward's status.

// tape: output o ≥ 1 at o·8: its step (u32 bits) and dense weights times dt; accepted step m at
// step_off(m): t0, dt, z0. The op sizes it for a few steps and doubles it when `record` says full.
fn step_off(m: u32) -> u32 {
    return dp.positions * 8u + m * (dp.len + 2u);
}

// Whether the tape holds another step after the `accepted` ones.
fn tape_has_room(accepted: u32) -> bool {
    return step_off(accepted + 1u) <= arrayLength(&tape);
}

@compute @workgroup_size(64)
fn record(@builtin(local_invocation_index) lid: u32) {
    var c = load_ctl(lid);
    let n = dp.len;
    if (dp.chunk == 0u) {
        for (var i = lid; i < n; i += WG) {
            dv[slot(Z) + i] = traj_in[i];
        }
    }
    var full = false;
    for (var u = 0u; u < dp.units; u++) {
        if (c.phase >= DONE) {
            break;
        }
        if (c.phase == INIT) {
            c = start_trajectory(c, lid);
            continue;
        }
        if (!tape_has_room(c.accepted)) {
            full = true;
            break;
        }
        c = attempt(c, lid);
        if (c.ok == 1u) {
            while (output_in_step(c)) {
                let w = output_weights(c);
                if (lid == 0u) {
                    let o = c.next_out * 8u;
                    tape[o] = bitcast<f32>(c.accepted);
                    tape[o + 1u] = w[0].x;
                    tape[o + 2u] = w[0].y;
                    tape[o + 3u] = w[0].z;
                    tape[o + 4u] = w[0].w;
                    tape[o + 5u] = w[1].x;
                    tape[o + 6u] = w[1].y;
                    tape[o + 7u] = w[1].z;
                }
                c.next_out += 1u;
            }
            let m = step_off(c.accepted);
            if (lid == 0u) {
                tape[m] = now(c);
                tape[m + 1u] = c.dt;
            }
            for (var i = lid; i < n; i += WG) {
                tape[m + 2u + i] = dv[slot(Z) + i];
            }
            c.accepted += 1u;
            c = accept_trajectory(c, lid);
        }
    }
    store_ctl(c, full, lid);
}

// dv[KB0 + j] += coefⱼ · dv[bar] for the seven slope adjoints; no barrier.
fn add_to_slope_bars(bar: u32, lo: vec4<f32>, hi: vec4<f32>, lid: u32) {
    let n = dp.len;
    let kb = slot(KB0);
    for (var i = lid; i < n; i += WG) {
        let v = dv[bar + i];
        dv[kb + i] += lo.x * v;
        dv[kb + n + i] += lo.y * v;
        dv[kb + 2u * n + i] += lo.z * v;
        dv[kb + 3u * n + i] += lo.w * v;
        dv[kb + 4u * n + i] += hi.x * v;
        dv[kb + 5u * n + i] += hi.y * v;
        dv[kb + 6u * n + i] += hi.z * v;
    }
}

// Where backprop sums dθ in `dv`.
fn theta_bar_off() -> u32 {
    return dp.hidden_off + 2u * dp.blocks * dp.k;
}

// Backprop through the recorded steps, from the last; the controller words 16.. hold the walk.
@compute @workgroup_size(64)
fn backprop(@builtin(local_invocation_index) lid: u32) {
    let n = dp.len;
    if (lid == 0u) {
        if (dp.chunk == 0u) {
            // Nothing to walk when the recording failed (finish writes NaN).
            wwalk = Walk(select(0u, ctl[5], ctl[0] == DONE), dp.positions - 1u);
        } else {
            wwalk = Walk(ctl[WALK], ctl[WALK + 1u]);
        }
    }
    var w = workgroupUniformLoad(&wwalk);
    if (dp.chunk == 0u) {
        for (var i = lid; i < n; i += WG) {
            dv[slot(ZBAR) + i] = 0.0;
        }
        for (var e = lid; e < dp.param_len; e += WG) {
            dv[theta_bar_off() + e] = 0.0;
        }
    }
    for (var u = 0u; u < dp.units; u++) {
        if (w.steps_left == 0u) {
            break;
        }
        let m = step_off(w.steps_left - 1u);
        let ts = share(vec4<f32>(tape[m], tape[m + 1u], 0.0, 0.0), lid);
        let t0 = ts.x;
        let dt = ts.y;
        for (var i = lid; i < n; i += WG) {
            dv[slot(Z) + i] = tape[m + 2u + i];
        }
        storageBarrier();
        field(t0, slot(Z), slot(K0), lid);
        for (var i = 1u; i < 7u; i++) {
            combine_into(slot(X1 + i - 1u), slot(Z), K0, dt * tab_a_lo(i), dt * tab_a_hi(i), lid);
            storageBarrier();
            field(t0 + tab_c(i) * dt, slot(X1 + i - 1u), slot(K0 + i), lid);
        }
        // z₁ = z₀ + dt·Σ bᵢ kᵢ, and each output in this step is z₀ + dt·Σ wᵢ kᵢ.
        let b_lo = dt * tab_b_lo();
        let b_hi = dt * tab_b_hi();
        for (var i = lid; i < n; i += WG) {
            let zb = dv[slot(ZBAR) + i];
            dv[slot(ZBAR0) + i] = zb;
            dv[slot(KB0) + i] = b_lo.x * zb;
            dv[slot(KB0 + 1u) + i] = b_lo.y * zb;
            dv[slot(KB0 + 2u) + i] = b_lo.z * zb;
            dv[slot(KB0 + 3u) + i] = b_lo.w * zb;
            dv[slot(KB0 + 4u) + i] = b_hi.x * zb;
            dv[slot(KB0 + 5u) + i] = b_hi.y * zb;
            dv[slot(KB0 + 6u) + i] = b_hi.z * zb;
        }
        loop {
            if (w.out_ptr == 0u) {
                break;
            }
            let o = w.out_ptr * 8u;
            let step = share(vec4<f32>(tape[o], 0.0, 0.0, 0.0), lid);
            if (bitcast<u32>(step.x) != w.steps_left - 1u) {
                break;
            }
            let lo = share(vec4<f32>(tape[o + 1u], tape[o + 2u], tape[o + 3u], tape[o + 4u]), lid);
            let hi = share(vec4<f32>(tape[o + 5u], tape[o + 6u], tape[o + 7u], 0.0), lid);
            let up = w.out_ptr * n;
            for (var i = lid; i < n; i += WG) {
                let bar = upstream[up + i];
                dv[slot(ZBAR0) + i] += bar;
                let kb = slot(KB0) + i;
                dv[kb] += lo.x * bar;
                dv[kb + n] += lo.y * bar;
                dv[kb + 2u * n] += lo.z * bar;
                dv[kb + 3u * n] += lo.w * bar;
                dv[kb + 4u * n] += hi.x * bar;
                dv[kb + 5u * n] += hi.y * bar;
                dv[kb + 6u * n] += hi.z * bar;
            }
            w.out_ptr -= 1u;
        }
        storageBarrier();
        // Stage q: k_q = h(t₀ + c_q dt, x_q), x_q = z₀ + dt·Σ_l a_ql k_l.
        for (var q1 = 7u; q1 > 0u; q1--) {
            let q = q1 - 1u;
            var x = slot(Z);
            if (q > 0u) {
                x = slot(X1 + q - 1u);
            }
            vjp_rows(t0 + tab_c(q) * dt, x, slot(KB0 + q), slot(IB), 1.0, theta_bar_off(), true, lid);
            for (var i = lid; i < n; i += WG) {
                dv[slot(ZBAR0) + i] += dv[slot(IB) + i];
            }
            add_to_slope_bars(slot(IB), dt * tab_a_lo(q), dt * tab_a_hi(q), lid);
            storageBarrier();
        }
        for (var i = lid; i < n; i += WG) {
            dv[slot(ZBAR) + i] = dv[slot(ZBAR0) + i];
        }
        storageBarrier();
        w.steps_left -= 1u;
    }
    if (lid == 0u) {
        ctl[WALK] = w.steps_left;
        ctl[WALK + 1u] = w.out_ptr;
        ctl[WALK_FLAG] = select(GOING, FINISHED, w.steps_left == 0u);
    }
}

// The adjoint backward over every interval [t_{i−1}, t_i], i from the last position down.
@compute @workgroup_size(64)
fn adjoint(@builtin(local_invocation_index) lid: u32) {
    var c = load_ctl(lid);
    let n = dp.blocks * dp.d;
    let last = dp.positions - 1u;
    if (dp.chunk == 0u) {
        for (var i = lid; i < dp.len; i += WG) {
            var v = 0.0;
            if (i < n) {
                v = traj_in[last * n + i];
            } else if (i < 2u * n) {
                v = upstream[last * n + i - n];
            }
            dv[slot(Z) + i] = v;
        }
        c.next_out = last;
        if (last == 0u) {
            c.phase = DONE;
        }
    }
    for (var u = 0u; u < dp.units; u++) {
        if (c.phase >= DONE) {
            break;
        }
        if (c.phase == INIT) {
            c = start(c, c.next_out, lid);
            continue;
        }
        c = attempt(c, lid);
        if (c.ok == 1u) {
            let i = c.next_out;
            if (in_step(c, i - 1u)) {
                // The interval's end: the dense output, then p restarts from the forward solution
                // and a takes the upstream of p(t_{i−1}).
                let x = step_fraction(c, i - 1u);
                combine_into(slot(X), slot(Z), K0, c.dt * dense_lo(x), c.dt * dense_hi(x), lid);
                storageBarrier();
                for (var e = lid; e < dp.len; e += WG) {
                    var v = dv[slot(X) + e];
                    if (e < n) {
                        v = traj_in[(i - 1u) * n + e];
                    } else if (e < 2u * n) {
                        v += upstream[(i - 1u) * n + e - n];
                    }
                    dv[slot(Z) + e] = v;
                }
                storageBarrier();
                c.next_out = i - 1u;
                c.phase = select(INIT, DONE, i == 1u);
            } else {
                c = accept(c, lid);
            }
        }
    }
    store_ctl(c, false, lid);
}

// dθ and dp0 from backprop (`tape` walked to the start) or the adjoint (its augmented state), NaN
// when the solve failed; and the backward's status [code, −1, time, attempts]: the attempts, and
// the position time the adjoint was integrating back from.
@compute @workgroup_size(64)
fn finish(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = gid.x + gid.y * groups.x * WG;
    let n = dp.blocks * dp.d;
    let ok = ctl[0] == DONE && (dp.adjoint == 1u || ctl[WALK] == 0u);
    if (i == 0u) {
        let adjoint = dp.adjoint == 1u;
        bstatus[0] = select(select(STATUS_REPLAY_FAILED, STATUS_ADJOINT_FAILED, adjoint), STATUS_OK, ok);
        bstatus[1] = -1.0;
        bstatus[2] = select(0.0, time(ctl[4]), adjoint && !ok);
        bstatus[3] = f32(ctl[3]);
    }
    if (i < dp.param_len) {
        var v = dp.nan;
        if (ok && dp.adjoint == 1u) {
            v = dv[slot(Z) + 2u * n + i];
        } else if (ok) {
            v = dv[theta_bar_off() + i];
        }
        dtheta[i] = v;
    }
    if (i < n) {
        var v = dp.nan;
        if (ok && dp.adjoint == 1u) {
            v = dv[slot(Z) + n + i];
        } else if (ok) {
            v = dv[slot(ZBAR) + i] + upstream[i];
        }
        dp0[i] = v;
    }
}
