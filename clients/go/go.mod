module github.com/bakery-rs/bakery/clients/go

go 1.22
