use std::rc::Rc;
use std::time::Instant;
use posflow::backend::{Backend, gpu_backend_for_tests};
use posflow::exec::Executor;
use posflow::graph::Graph;
use posflow::params::ParamStore;
use posflow::tensor::TensorMeta;

fn main() {
    let gpu = gpu_backend_for_tests().unwrap();
    let backend: Rc<dyn Backend> = Rc::new(gpu);
    let shapes: &[(usize, usize, usize, bool, bool, usize)] = &[
        (2048, 384, 128, false, false, 4), (2048, 128, 128, false, false, 4), (2048, 512, 128, false, false, 4), (2048, 128, 512, false, false, 4), (2048, 65, 128, false, true, 1),
        (2048, 128, 384, false, true, 4), (2048, 128, 128, false, true, 4), (2048, 128, 512, false, true, 4), (2048, 512, 128, false, true, 4), (2048, 128, 65, false, false, 1),
        (128, 384, 2048, true, false, 4), (128, 128, 2048, true, false, 4), (128, 512, 2048, true, false, 4), (512, 128, 2048, true, false, 4), (65, 128, 2048, true, false, 1),
    ];
    let mut total = 0.0;
    for &(m, n, k, ta, tb, count) in shapes {
        let mut g = Graph::new();
        let a = g.input("a", TensorMeta::f32(&if ta { [k, m] } else { [m, k] }));
        let b = g.input("b", TensorMeta::f32(&if tb { [n, k] } else { [k, n] }));
        let c = g.matmul_t(a, b, ta, tb).unwrap();
        let params = ParamStore::init(backend.clone(), &g, 0).unwrap();
        let exec = Executor::new(&g, &[c], &params).unwrap();
        exec.set_f32(a, &vec![0.5; m * k]).unwrap();
        exec.set_f32(b, &vec![0.25; k * n]).unwrap();
        exec.run().unwrap();
        exec.read_blocking(c).unwrap();
        let reps = 5;
        let start = Instant::now();
        for _ in 0..reps { exec.run().unwrap(); }
        exec.read_blocking(c).unwrap();
        let s = start.elapsed().as_secs_f64() / reps as f64;
        total += s * count as f64;
        println!("{m:5} {n:4} {k:5} ta {ta:5} tb {tb:5} x{count}: {:8.2} ms {:6.2} GFLOP/s", s * 1e3, 2.0 * (m * n * k) as f64 / s / 1e9);
    }
    println!("total per step: {:.0} ms", total * 1e3);
}
