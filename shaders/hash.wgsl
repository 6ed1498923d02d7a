
// PCG's output permutation of a 32-bit state: the counter-based hash of dropout masks, the same
// u32 arithmetic as `pcg` in src/ops/dropout.rs, so every backend draws the same mask. Appended
// to each module that draws one (dropout, attention).
fn pcg(v: u32) -> u32 {
    let state = v * 747796405u + 2891336453u;
    let word = ((state >> ((state >> 28u) + 4u)) ^ state) * 277803737u;
    return (word >> 22u) ^ word;
}
