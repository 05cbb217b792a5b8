//! `assign_if`: assignments inside the block hold only where every enclosing flag is
//! true, reads see the selected value, a flag must be a boolean of rank 0, and a block
//! that fails leaves no flag behind.

use spore_core::conditional_assign::assign_if;
use spore_core::{Error, Parameter, Tensor};

#[test]
fn assignments_follow_every_enclosing_flag_and_blocks_end_cleanly() {
    let p = Parameter::new(Tensor::from_vec(vec![1.0f32, 2.0], &[2]).unwrap(), "p");
    let values = || p.value().to_vec::<f32>().unwrap();
    let add_one = || {
        p.assign(&p.value().add_scalar(1.0)?)?;
        // A read inside the block sees the selected value.
        p.value().to_vec::<f32>()
    };
    let (yes, no) = (Tensor::scalar(true), Tensor::scalar(false));
    assert_eq!(assign_if(&no, add_one).unwrap(), vec![1.0, 2.0]);
    assert_eq!(
        assign_if(&yes, || assign_if(&no, add_one)).unwrap(),
        vec![1.0, 2.0]
    );
    assert_eq!(
        assign_if(&yes, || assign_if(&yes, add_one)).unwrap(),
        vec![2.0, 3.0]
    );
    // Only a boolean of rank 0: a flag of shape [1] would broadcast a scalar parameter.
    for bad in [
        Tensor::from_vec(vec![true], &[1]).unwrap(),
        Tensor::scalar(1.0f32),
    ] {
        assert!(assign_if(&bad, add_one).is_err(), "{:?}", bad.tensor_type());
    }
    // A failed block drops its flag: the next assignment outside holds.
    let failed: spore_core::Result<()> = assign_if(&no, || Err(Error::invalid("the block fails")));
    assert!(failed.is_err());
    p.assign(&Tensor::from_vec(vec![7.0f32, 8.0], &[2]).unwrap())
        .unwrap();
    assert_eq!(values(), vec![7.0, 8.0]);
}
