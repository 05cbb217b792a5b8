use super::Quantized;
use crate::emit::Api;
pub fn int8_sources(_q: &Quantized, _a: &Api, _o: &[Option<usize>]) -> [String; 3] {
    [String::new(), String::new(), String::new()]
}
