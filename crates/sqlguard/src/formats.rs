//! Format strings: `printf`/`format` calls may not ask for huge or argument-supplied field
//! widths (`printf('%1000000000d', 1)`, `format('{:>{}}', x, 1e9)`), and the format must be a
//! literal so it can be checked.

use sqlparser::ast::{Function, FunctionArg};

use crate::bombs::{MAX_GENERATED_LENGTH, show, string_literal, unnamed_expr};
use crate::rejection::{Rejection, excerpt};

/// Checks the format string of `printf`/`format` for huge or argument-supplied field widths.
pub(crate) fn check_format_string(
    name: &str,
    args: &[FunctionArg],
    call: &Function,
) -> Result<(), Rejection> {
    let Some(format) = args.first().and_then(unnamed_expr).and_then(string_literal) else {
        return Err(Rejection::new(
            format!(
                "the format string of {name} must be a string literal, in {}",
                excerpt(call)
            ),
            format!("write the format as a literal, e.g. {name}('%d ms', x)"),
        ));
    };
    let problem = if name == "printf" {
        printf_problem(&format)
    } else {
        fmt_problem(&format)
    };
    match problem {
        Some(problem) => Err(Rejection::new(
            format!(
                "the format string of {name} {problem}, in {}",
                excerpt(call)
            ),
            format!(
                "use literal field widths of at most {}",
                show(MAX_GENERATED_LENGTH)
            ),
        )),
        None => Ok(()),
    }
}

/// What is wrong with a printf-style format string, if anything.
fn printf_problem(format: &str) -> Option<String> {
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            continue;
        }
        if chars.peek() == Some(&'%') {
            chars.next();
            continue;
        }
        let mut spec = String::new();
        while let Some(&c) = chars.peek() {
            if c.is_ascii_digit() || "-+ #0.*'lhLqjzt".contains(c) {
                spec.push(c);
                chars.next();
            } else {
                break;
            }
        }
        if let Some(problem) = width_problem(&spec) {
            return Some(problem);
        }
    }
    None
}

/// What is wrong with a `{fmt}`-style format string, if anything.
fn fmt_problem(format: &str) -> Option<String> {
    let mut depth = 0usize;
    let mut field = String::new();
    for c in format.chars() {
        match c {
            '{' => {
                depth += 1;
                if depth > 1 && !field.is_empty() {
                    return Some("takes a field width from an argument".to_string());
                }
                field.clear();
            }
            '}' if depth > 0 => {
                depth -= 1;
                if let Some(problem) = width_problem(&field) {
                    return Some(problem);
                }
                field.clear();
            }
            c if depth > 0 => field.push(c),
            _ => {}
        }
    }
    None
}

/// Checks a format spec's width/precision digits and `*` (width from an argument).
fn width_problem(spec: &str) -> Option<String> {
    if spec.contains('*') {
        return Some("takes a field width from an argument (*)".to_string());
    }
    spec.split(|c: char| !c.is_ascii_digit())
        .filter(|digits| !digits.is_empty())
        .map(|digits| digits.parse::<f64>().unwrap_or(f64::INFINITY))
        .find(|width| *width > MAX_GENERATED_LENGTH)
        .map(|width| format!("asks for a field width of {}", show(width)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printf_specs() {
        assert_eq!(printf_problem("%d %5.2f %-10s %%"), None);
        assert_eq!(printf_problem("100%% done"), None);
        assert!(
            printf_problem("%1000000000d")
                .unwrap()
                .contains("1000000000")
        );
        assert!(printf_problem("%.999999f").is_some());
        assert!(printf_problem("%*d").unwrap().contains("(*)"));
    }

    #[test]
    fn fmt_specs() {
        assert_eq!(fmt_problem("{} took {:.2f} ms {:>10}"), None);
        assert!(fmt_problem("{:>1000000}").is_some());
        assert!(fmt_problem("{:>{}}").unwrap().contains("from an argument"));
    }
}
