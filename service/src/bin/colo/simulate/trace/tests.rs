use super::*;

#[test]
fn names_and_inference() {
    assert_eq!(trace_name(Path::new("/a/b/multi3.trace.gz")), "multi3");
    assert_eq!(
        trace_name(Path::new("trace_vaultservice.gz")),
        "trace_vaultservice"
    );
    assert_eq!(trace_name(Path::new("x.arc.xz")), "x.arc");
    assert_eq!(
        TraceFormat::infer(Path::new("gli.trace.gz")),
        Some(TraceFormat::Lirs)
    );
    assert_eq!(
        TraceFormat::infer(Path::new("a.lirs2.xz")),
        Some(TraceFormat::Lirs2)
    );
    assert_eq!(TraceFormat::infer(Path::new("trace_vaultservice.gz")), None);
    assert_eq!(
        TraceFormat::infer(Path::new("traces/corda/trace_vaultservice.gz")),
        Some(TraceFormat::Corda)
    );
    assert_eq!(
        TraceFormat::infer(Path::new("extra/address/gcc.trace.gz")),
        Some(TraceFormat::Address)
    );
    assert_eq!(
        TraceFormat::infer(Path::new("extra/adapt_size/request.trace.xz")),
        Some(TraceFormat::AdaptSize)
    );
    assert_eq!(
        TraceFormat::infer(Path::new("extra/cache2k/orm-night.trace.xz")),
        Some(TraceFormat::Cache2k)
    );
    assert_eq!(
        TraceFormat::infer(Path::new("extra/scarab/x.trace.xz")),
        Some(TraceFormat::Scarab)
    );
    // A specific extension wins over the folder; `.trace` does not.
    assert_eq!(
        TraceFormat::infer(Path::new("scarab/x.lirs2")),
        Some(TraceFormat::Lirs2)
    );
    assert_eq!(
        TraceFormat::infer(Path::new("lirs/gli.trace.gz")),
        Some(TraceFormat::Lirs)
    );
    assert_eq!("LIRS".parse::<TraceFormat>().ok(), Some(TraceFormat::Lirs));
    assert!("csv".parse::<TraceFormat>().is_err());
}
