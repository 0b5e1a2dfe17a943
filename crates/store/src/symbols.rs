//! Symbols as people read them: C++ names demangled without parameters, one rule for stacks
//! and kernel names (the store keeps the raw symbol for exact matching).

/// A C++ (Itanium ABI) symbol as people read it, without parameters or return type
/// (`at::native::masked_fill_kernel`), keeping a `+0x..` offset; anything else unchanged.
pub fn demangle(symbol: &str) -> String {
    let (base, offset) = match symbol.rfind("+0x") {
        Some(i) => symbol.split_at(i),
        None => (symbol, ""),
    };
    let base = base.strip_suffix(".isra.0").unwrap_or(base);
    if !base.starts_with("_Z") {
        return symbol.to_string();
    }
    let options = cpp_demangle::DemangleOptions::default()
        .no_params()
        .no_return_type();
    match cpp_demangle::Symbol::new(base).map(|s| s.demangle_with_options(&options)) {
        Ok(Ok(name)) => format!("{name}{offset}"),
        _ => symbol.to_string(),
    }
}

/// A C++ kernel symbol's full signature as people read it, parameters kept and no return type
/// (`saxpy_forward(float*, float const*, float, int)`), so overloads and template instances
/// stay apart; anything else unchanged.
pub fn signature(symbol: &str) -> String {
    if !symbol.starts_with("_Z") {
        return symbol.to_string();
    }
    let options = cpp_demangle::DemangleOptions::default().no_return_type();
    match cpp_demangle::Symbol::new(symbol).map(|s| s.demangle_with_options(&options)) {
        Ok(Ok(name)) => name,
        _ => symbol.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::{demangle, signature};

    #[test]
    fn kernel_signatures_keep_their_parameters() {
        assert_eq!(
            signature("_Z13saxpy_forwardPfPKffi"),
            "saxpy_forward(float*, float const*, float, int)"
        );
        assert_eq!(
            signature("_Z13saxpy_forwardPdPKddi"),
            "saxpy_forward(double*, double const*, double, int)"
        );
        assert_eq!(signature("my_kernel"), "my_kernel");
    }

    #[test]
    fn cpp_symbols_are_demangled_and_others_kept() {
        assert_eq!(
            demangle("_ZN2at6native17masked_fill__cudaERNS_6TensorERKS1_RKN3c106ScalarE+0x6ea"),
            "at::native::masked_fill__cuda+0x6ea"
        );
        assert_eq!(demangle("cudaLaunchKernel+0x10"), "cudaLaunchKernel+0x10");
        assert_eq!(demangle("0x7f00"), "0x7f00");
        assert_eq!(demangle("_Znot a symbol"), "_Znot a symbol");
    }
}
