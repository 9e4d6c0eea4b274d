# Conventional entry points over the repository's scripts (each documented in its own header).
#   make                 build the CLI (release)
#   make install         install it, its man pages and bash/zsh/fish completions under PREFIX
#                        (default /usr/local; DESTDIR for staged installs)
#   make install-lib     the C/C++ library, headers and pagewise.pc under PREFIX
#   make dist            ./release: the release artifacts in dist/
#   make test            the whole test suite (the README's test command)
PREFIX ?= /usr/local
DESTDIR ?=
CARGO ?= cargo

.PHONY: all build install install-lib dist test
all: build

build:
	$(CARGO) build --release --locked --bin pagewise

install: build
	install -D -m 0755 target/release/pagewise $(DESTDIR)$(PREFIX)/bin/pagewise
	DESTDIR=$(DESTDIR) PAGEWISE=target/release/pagewise bash contrib/install-extras $(PREFIX)

install-lib:
	DESTDIR=$(DESTDIR) CARGO=$(CARGO) bash crates/pagewise-capi/install.sh $(PREFIX)

dist:
	./release

test:
	$(CARGO) test --workspace --profile ci
