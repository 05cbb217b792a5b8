//! Optimizers against their written formulas (an f64 reference per element), compiled vs
//! eager updates, learning-rate schedules, weight-decay filters and state names.

use std::sync::Arc;

use spore_compile::jit;
use spore_core::{DType, Parameter, Tensor};
use spore_nn::optim::*;

use super::{assert_close, serial};

const STEPS: usize = 4;

/// Two parameters: `fc.bias` (rank 1) and `fc.weight` (rank 2).
fn params() -> Vec<Parameter> {
    vec![
        Parameter::new(
            Tensor::from_vec(vec![0.5f64, -1.0, 2.0], &[3]).unwrap(),
            "fc.bias",
        ),
        Parameter::new(
            Tensor::from_vec(vec![0.1f64, 0.2, -0.3, 0.4], &[2, 2]).unwrap(),
            "fc.weight",
        ),
    ]
}

fn grad_value(step: usize, param: usize, elem: usize) -> f64 {
    (1.0 + step as f64 * 1.3 + param as f64 * 0.7 + elem as f64 * 0.37).sin()
}

fn grads(step: usize, ps: &[Parameter]) -> Vec<Tensor> {
    ps.iter()
        .enumerate()
        .map(|(i, p)| {
            let ty = p.tensor_type();
            let v: Vec<f64> = (0..ty.numel()).map(|j| grad_value(step, i, j)).collect();
            Tensor::from_vec(v, &ty.shape).unwrap()
        })
        .collect()
}

/// One element's update: (1-based step, parameter, gradient, state, decayed?).
type Rule = dyn Fn(usize, &mut f64, f64, &mut [f64; 4], bool);

/// Runs `opt` for STEPS steps and the per-element `rule` alongside, then compares.
fn check(
    opt: Arc<dyn Optimizer>,
    ps: &[Parameter],
    decayed: [bool; 2],
    rule: &Rule,
    init: [f64; 4],
) {
    let mut reference: Vec<Vec<(f64, [f64; 4])>> = ps
        .iter()
        .map(|p| {
            p.value()
                .to_vec::<f64>()
                .unwrap()
                .into_iter()
                .map(|v| (v, init))
                .collect()
        })
        .collect();
    for s in 0..STEPS {
        opt.apply(&grads(s, ps)).unwrap();
        for (i, elems) in reference.iter_mut().enumerate() {
            for (j, (p, st)) in elems.iter_mut().enumerate() {
                rule(s + 1, p, grad_value(s, i, j), st, decayed[i]);
            }
        }
    }
    for (i, p) in ps.iter().enumerate() {
        let expected: Vec<f64> = reference[i].iter().map(|(v, _)| *v).collect();
        let e = Tensor::from_vec(expected, &p.tensor_type().shape).unwrap();
        assert_close(
            &p.value(),
            &e,
            1e-6,
            &format!("{} {}", opt.class_name(), p.name()),
        );
    }
    let step = opt
        .state()
        .into_iter()
        .find(|(n, _)| n == "global_step")
        .unwrap()
        .1;
    assert_eq!(step.value().to_vec::<i32>().unwrap(), vec![STEPS as i32]);
}

#[test]
fn momentum_and_nesterov_follow_mindspore() {
    let _s = serial();
    let (lr, mu, wd) = (0.1, 0.9, 0.01);
    for nesterov in [false, true] {
        let ps = params();
        let opt = Momentum::config(ps.clone(), lr, mu)
            .weight_decay(wd)
            .decay_filter(DecayFilter::SkipBiasAndNorm)
            .nesterov(nesterov)
            .build()
            .unwrap();
        let rule = move |_t: usize, p: &mut f64, g: f64, st: &mut [f64; 4], d: bool| {
            let g = if d { g + wd * *p } else { g };
            st[0] = mu * st[0] + g;
            *p -= lr * if nesterov { g + mu * st[0] } else { st[0] };
        };
        check(opt, &ps, [false, true], &rule, [0.0; 4]);
    }
}

#[test]
fn sgd_follows_pytorch() {
    let _s = serial();
    let (lr, wd) = (0.05, 0.1);
    for (mu, damp, nesterov) in [(0.0, 0.0, false), (0.9, 0.3, false), (0.8, 0.0, true)] {
        let ps = params();
        let opt = SGD::config(ps.clone(), lr)
            .momentum(mu)
            .dampening(damp)
            .nesterov(nesterov)
            .weight_decay(wd)
            .decay_filter(DecayFilter::All)
            .build()
            .unwrap();
        let rule = move |t: usize, p: &mut f64, g: f64, st: &mut [f64; 4], d: bool| {
            let mut g = if d { g + wd * *p } else { g };
            if mu != 0.0 {
                st[0] = if t == 1 {
                    g
                } else {
                    mu * st[0] + (1.0 - damp) * g
                };
                g = if nesterov { g + mu * st[0] } else { st[0] };
            }
            *p -= lr * g;
        };
        check(opt, &ps, [true, true], &rule, [0.0; 4]);
    }
}

#[test]
fn adam_bias_corrects_the_learning_rate_not_epsilon() {
    let _s = serial();
    let (lr, b1, b2, eps, wd) = (0.01, 0.9, 0.99, 1e-3, 0.05);
    for nesterov in [false, true] {
        let ps = params();
        let opt = Adam::config(ps.clone(), lr)
            .betas(b1, b2)
            .eps(eps)
            .weight_decay(wd)
            .nesterov(nesterov)
            .build()
            .unwrap();
        let rule = move |t: usize, p: &mut f64, g: f64, st: &mut [f64; 4], d: bool| {
            let g = if d { g + wd * *p } else { g };
            st[0] = b1 * st[0] + (1.0 - b1) * g;
            st[1] = b2 * st[1] + (1.0 - b2) * g * g;
            let lr_t = lr * (1.0 - b2.powi(t as i32)).sqrt() / (1.0 - b1.powi(t as i32));
            let m = if nesterov {
                b1 * st[0] + (1.0 - b1) * g
            } else {
                st[0]
            };
            *p -= lr_t * m / (st[1].sqrt() + eps);
        };
        // MindSporeDefault decays both: neither name holds beta/gamma.
        check(opt, &ps, [true, true], &rule, [0.0; 4]);
    }
}

#[test]
fn adam_weight_decay_has_no_bias_correction() {
    let _s = serial();
    let (lr, b1, b2, eps, wd) = (0.01, 0.9, 0.999, 1e-6, 0.1);
    let ps = params();
    let opt = AdamWeightDecay::config(ps.clone(), lr)
        .weight_decay(wd)
        .decay_filter(DecayFilter::SkipBiasAndNorm)
        .build()
        .unwrap();
    let rule = move |_t: usize, p: &mut f64, g: f64, st: &mut [f64; 4], d: bool| {
        st[0] = b1 * st[0] + (1.0 - b1) * g;
        st[1] = b2 * st[1] + (1.0 - b2) * g * g;
        let update = st[0] / (st[1].sqrt() + eps) + if d { wd * *p } else { 0.0 };
        *p -= lr * update;
    };
    check(opt, &ps, [false, true], &rule, [0.0; 4]);
}

#[test]
fn adamw_follows_pytorch() {
    let _s = serial();
    let (lr, b1, b2, eps, wd) = (0.02, 0.9, 0.999, 1e-8, 0.01);
    let ps = params();
    let opt = AdamW::new(ps.clone(), lr).unwrap();
    let rule = move |t: usize, p: &mut f64, g: f64, st: &mut [f64; 4], d: bool| {
        if d {
            *p *= 1.0 - lr * wd;
        }
        st[0] = b1 * st[0] + (1.0 - b1) * g;
        st[1] = b2 * st[1] + (1.0 - b2) * g * g;
        let bc1 = 1.0 - b1.powi(t as i32);
        let bc2 = 1.0 - b2.powi(t as i32);
        *p -= lr / bc1 * st[0] / (st[1].sqrt() / bc2.sqrt() + eps);
    };
    check(opt, &ps, [true, true], &rule, [0.0; 4]);
}

#[test]
fn rmsprop_starts_mean_square_at_one_with_epsilon_inside_the_root() {
    let _s = serial();
    let (lr, decay, eps) = (0.01, 0.9, 1e-6);
    for (mu, centered) in [(0.0, false), (0.5, false), (0.5, true)] {
        let ps = params();
        let opt = RMSProp::config(ps.clone(), lr)
            .decay(decay)
            .momentum(mu)
            .epsilon(eps)
            .centered(centered)
            .build()
            .unwrap();
        let rule = move |_t: usize, p: &mut f64, g: f64, st: &mut [f64; 4], _d: bool| {
            st[0] = decay * st[0] + (1.0 - decay) * g * g;
            let mut denom = st[0];
            if centered {
                st[2] = decay * st[2] + (1.0 - decay) * g;
                denom -= st[2] * st[2];
            }
            st[1] = mu * st[1] + lr * g / (denom + eps).sqrt();
            *p -= st[1];
        };
        check(opt, &ps, [false, false], &rule, [1.0, 0.0, 0.0, 0.0]);
    }
}

/// The same optimizer applied eagerly and through `jit` (as inside a training graph).
fn eager_vs_compiled(make: impl Fn(Vec<Parameter>) -> Arc<dyn Optimizer>) {
    let (pe, pc) = (params(), params());
    let (oe, oc) = (make(pe.clone()), make(pc.clone()));
    let name = oe.class_name();
    let (occ, pcc) = (oc.clone(), pc.clone());
    let step = jit("apply", move |g: &[Tensor]| {
        occ.apply(g)?;
        Ok(vec![pcc[0].value()])
    });
    for s in 0..STEPS {
        oe.apply(&grads(s, &pe)).unwrap();
        step.call(&grads(s, &pc)).unwrap();
    }
    assert_eq!(step.compile_count(), 1, "{name}: one compile");
    for ((a, b), ((n, sa), (_, sb))) in pe.iter().zip(&pc).zip(oe.state().iter().zip(oc.state())) {
        assert_close(
            &b.value(),
            &a.value(),
            1e-12,
            &format!("{name}: {}", a.name()),
        );
        assert_close(
            &sb.value(),
            &sa.value(),
            1e-12,
            &format!("{name}: state {n}"),
        );
    }
}

#[test]
fn optimizers_and_schedules_trace_into_graphs() {
    let _s = serial();
    let sched = || WarmupCosineLR::new(0.001, 0.1, 2, 5);
    eager_vs_compiled(|p| {
        Momentum::config(p, sched(), 0.9)
            .nesterov(true)
            .build()
            .unwrap()
    });
    eager_vs_compiled(|p| {
        SGD::config(p, 0.1)
            .momentum(0.9)
            .dampening(0.1)
            .build()
            .unwrap()
    });
    eager_vs_compiled(|p| Adam::new(p, ExponentialDecayLR::new(0.1, 0.5, 2, true)).unwrap());
    eager_vs_compiled(|p| {
        AdamWeightDecay::config(p, 0.01)
            .weight_decay(0.1)
            .build()
            .unwrap()
    });
    eager_vs_compiled(|p| {
        AdamW::new(p, PiecewiseConstantLR::new(&[1, 3], &[0.1, 0.01]).unwrap()).unwrap()
    });
    eager_vs_compiled(|p| {
        RMSProp::config(p, DynamicLR::new(&[0.1, 0.05, 0.02]).unwrap())
            .momentum(0.5)
            .centered(true)
            .build()
            .unwrap()
    });
}

#[test]
fn schedules_follow_their_formulas() {
    let _s = serial();
    let pi = std::f64::consts::PI;
    let close = |a: f64, b: f64| assert!((a - b).abs() < 1e-6 * (1.0 + b.abs()), "{a} vs {b}");
    let exp = ExponentialDecayLR::new(0.1, 0.9, 4, false);
    let stair = ExponentialDecayLR::new(0.1, 0.9, 4, true);
    let cos = CosineDecayLR::new(0.01, 0.1, 10);
    let warm = WarmUpLR::new(0.1, 4);
    let wc = WarmupCosineLR::new(0.01, 0.1, 4, 10);
    let pw = PiecewiseConstantLR::new(&[2, 5, 10], &[0.1, 0.05, 0.01]).unwrap();
    assert_eq!(
        pw.to_list(),
        [vec![0.1; 2], vec![0.05; 3], vec![0.01; 5]].concat()
    );
    let dynamic = DynamicLR::new(&pw.to_list()).unwrap();
    for s in 0..14u64 {
        let t = s as f64;
        close(exp.at(s).unwrap(), 0.1 * 0.9f64.powf(t / 4.0));
        close(stair.at(s).unwrap(), 0.1 * 0.9f64.powf((t / 4.0).floor()));
        let p = t.min(10.0) / 10.0;
        close(
            cos.at(s).unwrap(),
            0.01 + 0.5 * 0.09 * (1.0 + (pi * p).cos()),
        );
        close(warm.at(s).unwrap(), 0.1 * t.min(4.0) / 4.0);
        let expect_wc = if s < 4 {
            0.1 * t / 4.0
        } else {
            0.01 + 0.5 * 0.09 * (1.0 + (pi * ((t - 4.0).min(10.0) / 10.0)).cos())
        };
        close(wc.at(s).unwrap(), expect_wc);
        let list = pw.to_list();
        let expect_pw = list[(s as usize).min(list.len() - 1)];
        close(pw.at(s).unwrap(), expect_pw);
        close(dynamic.at(s).unwrap(), expect_pw);
    }
    assert!(PiecewiseConstantLR::new(&[3, 2], &[0.1, 0.2]).is_err());
    assert!(DynamicLR::new(&[]).is_err());

    // Inside an optimizer: momentum 0, so each step moves by lr(step) * g.
    let w = Parameter::new(Tensor::zeros(&[1], DType::F64).unwrap(), "w");
    let opt = Momentum::new(
        vec![w.clone()],
        ExponentialDecayLR::new(1.0, 0.5, 1, false),
        0.0,
    )
    .unwrap();
    let mut expected = 0.0;
    for s in 0..4 {
        opt.apply(&[Tensor::ones(&[1], DType::F64).unwrap()])
            .unwrap();
        expected -= 0.5f64.powi(s);
        close(w.value().item().unwrap(), expected);
    }
}

#[test]
fn state_is_named_like_mindspore_and_learning_rate_can_change() {
    let _s = serial();
    let names = |o: &dyn Optimizer| o.state().into_iter().map(|(n, _)| n).collect::<Vec<_>>();
    let adam = Adam::new(params(), 0.01).unwrap();
    assert_eq!(
        names(&*adam),
        [
            "learning_rate",
            "global_step",
            "beta1_power",
            "beta2_power",
            "moment1.fc.bias",
            "moment1.fc.weight",
            "moment2.fc.bias",
            "moment2.fc.weight"
        ]
    );
    let rms = RMSProp::config(params(), 0.1)
        .centered(true)
        .build()
        .unwrap();
    assert!(names(&*rms).contains(&"mean_grad.fc.weight".to_string()));
    assert_eq!(
        rms.state()[2].1.value().to_vec::<f64>().unwrap(),
        vec![1.0; 3]
    );
    let sched = Momentum::new(params(), CosineDecayLR::new(0.0, 0.1, 10), 0.9).unwrap();
    assert_eq!(
        names(&*sched)[0],
        "global_step",
        "no learning_rate parameter with a schedule"
    );
    assert!(sched.state().iter().all(|(_, p)| !p.requires_grad()));

    let ps = params();
    let m = Momentum::new(ps.clone(), 0.1, 0.0).unwrap();
    m.core.set_learning_rate(0.5).unwrap();
    m.apply(&grads(0, &ps)).unwrap();
    let moved = 0.5 - ps[0].value().to_vec::<f64>().unwrap()[0];
    assert!((moved - 0.5 * grad_value(0, 0, 0)).abs() < 1e-7);
    assert!(sched.core.set_learning_rate(0.5).is_err());
}

#[test]
fn optimizer_errors_name_what_is_wrong() {
    let _s = serial();
    let ps = params();
    let opt = Momentum::new(ps.clone(), 0.1, 0.9).unwrap();
    let err = opt.apply(&grads(0, &ps)[..1]).unwrap_err().to_string();
    assert!(err.contains("expected 2 gradients"), "{err}");
    let wrong = vec![
        Tensor::zeros(&[3], DType::F64).unwrap(),
        Tensor::zeros(&[4], DType::F64).unwrap(),
    ];
    let err = opt.apply(&wrong).unwrap_err().to_string();
    assert!(
        err.contains("fc.weight") && err.contains("[4]") && err.contains("[2, 2]"),
        "{err}"
    );
    assert!(Momentum::new(vec![], 0.1, 0.9).is_err());
    assert!(Momentum::new(params(), -1.0, 0.9).is_err());
    assert!(Adam::config(params(), 0.1).betas(1.0, 0.9).build().is_err());
    assert!(SGD::config(params(), 0.1).nesterov(true).build().is_err());
    assert!(RMSProp::config(params(), 0.1).epsilon(0.0).build().is_err());
    let int = Parameter::new(Tensor::zeros(&[2], DType::I32).unwrap(), "steps");
    assert!(SGD::new(vec![int], 0.1).is_err());
}
