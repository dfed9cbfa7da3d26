"""Apple-signed disk images, verified offline: `udif` reads the image's trailer, signature
superblob and code directories; `cms` checks the CMS signature and the certificate chain;
`image` puts them together into `verify-app`'s report. `certs/` holds Apple's public roots and
Developer ID intermediates (their sources in `certs/README.md`)."""
