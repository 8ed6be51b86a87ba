TWIN = "a"
