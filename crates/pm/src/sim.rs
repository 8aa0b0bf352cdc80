//! Placeholder: the crash simulator is being written.
use crate::backend::*;
use crate::mapping::Mapping;
use crate::error::PoolResult;
/// Crash simulator (placeholder).
pub struct Sim { mapping: Mapping }
impl PmBackend for Sim {
    fn from_mapping(mapping: Mapping, _o: &PmOptions) -> PoolResult<Self> { Ok(Self { mapping }) }
    fn info(&self) -> BackendInfo { unimplemented!() }
    fn mapping(&self) -> &Mapping { &self.mapping }
    fn read(&self, _o: u64, _d: &mut [u8]) { unimplemented!() }
    fn load_u64(&self, _o: u64) -> u64 { unimplemented!() }
    fn write(&self, _o: u64, _s: &[u8]) { unimplemented!() }
    fn store_u64(&self, _o: u64, _v: u64) { unimplemented!() }
    fn compare_exchange_u64(&self, _o: u64, _c: u64, _n: u64) -> Result<u64, u64> { unimplemented!() }
    fn write_non_temporal(&self, _o: u64, _s: &[u8]) { unimplemented!() }
    fn flush(&self, _o: u64, _l: u64) { unimplemented!() }
    fn fence(&self) { unimplemented!() }
}
