//! pagewise: a thin CLI over pagewise-core. Parses, calls the library, renders.

/// `eprintln!` that never panics: stderr may be a terminal that hung up, and `record` / `run`
/// survive SIGHUP to finish their work (a panic there would lose the trace or the report).
macro_rules! eprintln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}

mod cli;

use clap::{CommandFactory, Parser};
use cli::exit::{CliError, ExitCode};
use cli::{Cli, Command};
use pagewise_core::error::{FatalDetail, FatalDocument, FatalKind};

/// True when the command line asks for JSON: a fatal error is then also a JSON document on
/// stdout, so a script reading it gets an answer, not nothing.
fn wants_json() -> bool {
    // sync's -J is rsync's --omit-link-times.
    let sync = std::env::args_os().nth(1).is_some_and(|v| v == "sync");
    std::env::args_os()
        .skip(1)
        .take_while(|a| a != "--")
        .any(|a| {
            let a = a.as_encoded_bytes();
            a == b"--json"
                || a == b"--json-lines"
                || (!sync && a.len() > 1 && a[0] == b'-' && a[1] != b'-' && a.contains(&b'J'))
        })
}

/// `{"error": {"exit_code": 1, "kind": ..., "message": ...}}` on stdout.
fn json_error(kind: FatalKind, message: &str) {
    let v = FatalDocument {
        error: FatalDetail {
            exit_code: ExitCode::Fatal.code(),
            kind,
            message: message.to_string(),
        },
    };
    println!("{}", serde_json::to_string(&v).unwrap_or_default());
}

fn main() {
    pagewise_core::sys::default_sigpipe();
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let verb = std::env::args().nth(1);
            match cli::usage::unknown_argument(&e, verb.as_deref()) {
                Some(msg) => {
                    use std::io::Write as _;
                    let _ = std::io::stderr().write_all(msg.as_bytes());
                }
                None => {
                    let _ = e.print();
                }
            }
            // Help and version go to stdout and succeed; usage errors are fatal (exit 1).
            if e.use_stderr() {
                if wants_json() {
                    let text = e.render().to_string();
                    json_error(FatalKind::Usage, text.lines().next().unwrap_or_default());
                }
                std::process::exit(ExitCode::Fatal.code());
            }
            std::process::exit(ExitCode::Success.code());
        }
    };
    let result = match cli.command {
        Command::Stat(a) => cli::stat::run(a),
        Command::Evict(a) => cli::evict::run(a),
        Command::Load(a) => cli::load::run(a),
        Command::Copy(a) => cli::copy::run(a),
        Command::Sync(a) => cli::copy::sync::run(*a),
        Command::Record(a) => cli::record::run(a),
        Command::Show(a) => cli::show::run(a),
        Command::Replay(a) => cli::replay::run(a),
        Command::Bench(a) => cli::bench::run(a),
        Command::Run(a) => cli::run::run(a),
        Command::Assist(a) => cli::assist::run(a),
        Command::Cgroups(a) => cli::cgroups::run(a),
        Command::Exporter(a) => cli::exporter::run(a),
        Command::Top(a) => cli::top::run(a),
        Command::Completions { shell } => {
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "pagewise",
                &mut std::io::stdout(),
            );
            Ok(ExitCode::Success)
        }
        Command::Man { dir } => write_man(&dir).map(|_| ExitCode::Success),
    };
    match result {
        Ok(code) => std::process::exit(code.code()),
        Err(e) => {
            let msg = e.to_string();
            eprintln!("pagewise: {msg}");
            if wants_json() {
                json_error(FatalKind::Fatal, &msg);
            }
            std::process::exit(ExitCode::Fatal.code());
        }
    }
}

/// `pagewise man DIR`: pagewise.1 and pagewise-VERB.1 for each verb, each written to a
/// temporary created O_CREAT|O_EXCL|O_NOFOLLOW in DIR and renamed over its name, so that a
/// name planted in a DIR others can write to is replaced, never written through.
fn write_man(dir: &std::path::Path) -> Result<(), CliError> {
    use std::io::Write;
    std::fs::create_dir_all(dir)
        .map_err(|e| CliError::file(dir.display().to_string(), "mkdir", e))?;
    let shared = pagewise_core::shared_dir::SharedDir::open_resolved(dir)
        .map_err(|e| CliError::file(dir.display().to_string(), "open", e))?;
    let cmd = Cli::command();
    let mut pages = vec![("pagewise".to_string(), cmd.clone())];
    for sub in cmd.get_subcommands() {
        pages.push((format!("pagewise-{}", sub.get_name()), sub.clone()));
    }
    for (name, c) in pages {
        let path = dir.join(format!("{name}.1"));
        let mut buf = Vec::new();
        clap_mangen::Man::new(c.name(Box::leak(name.clone().into_boxed_str()) as &str))
            .render(&mut buf)
            .map_err(|e| CliError::file(path.display().to_string(), "render", e))?;
        let name = std::ffi::OsString::from(format!("{name}.1"));
        let mut tmp = shared
            .create_temp(&name, 0o644)
            .map_err(|e| CliError::file(path.display().to_string(), "create", e))?;
        tmp.file
            .write_all(&buf)
            .map_err(|e| CliError::file(tmp.path().display().to_string(), "write", e))?;
        shared
            .replace(tmp, &name)
            .map_err(|e| CliError::file(path.display().to_string(), "rename", e))?;
    }
    Ok(())
}
